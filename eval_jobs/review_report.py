"""Report of the PoporoIN pair review, and the accepted pairs as ``pipelines.poporo_in`` reads them.

``python -m eval_jobs.review_report --db review.sqlite [--pairs-out runs/poporo_in/pairs] [--out report.json]``

Reads the review store written by the review page (``serve_apps.review_app``), prints agreement
(Cohen's kappa on accept/reject and on accept + reasons), the disagreements and their resolutions,
writes the JSON report (default ``<db>.report.json``) and, with ``--pairs-out``, one ``<cell>.txt``
pair list per cell plus ``pairs.json`` (the ``pairs`` block of the PoporoIN builder's config).
Writing the pair lists is refused while disagreements or pending pairs remain, unless
``--allow-open``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Sequence

from pydantic import Field

from relate.audit.review_report import format_review_report, review_report_from_store, write_accepted_pairs
from relate.audit.review_store import open_review_store
from relate.config import StrictConfig

__all__ = ["ReviewReportConfig", "main"]


class ReviewReportConfig(StrictConfig):
    """Inputs and outputs of the review report."""

    db: str = Field(..., description="SQLite review database written by serve_apps.review_app.")
    out: str | None = Field(None, description="JSON report path; default <db>.report.json.")
    pairs_out: str | None = Field(None, description="Folder for the accepted pair lists (<cell>.txt, pairs.json); "
                                  "none: no pair lists written.")
    min_reviews: int = Field(2, ge=1, le=10, description="Answers a pair needs before an agreement settles it.")
    allow_open: bool = Field(False, description="Write the pair lists even while some pairs are not settled "
                             "(only settled accepted pairs are written).")


def main(cfg: ReviewReportConfig) -> dict[str, Any]:
    """Build, print and write the report (and the pair lists when asked); returns the report."""
    db = Path(cfg.db)
    if not db.is_file():
        raise FileNotFoundError(f"review database not found: {db}")
    store = open_review_store(db)
    try:
        report = review_report_from_store(store, cfg.min_reviews)
    finally:
        store.close()
    if cfg.pairs_out:
        report["pair_lists"] = write_accepted_pairs(report, cfg.pairs_out, cfg.allow_open)
    out = Path(cfg.out) if cfg.out else db.with_name(db.name + ".report.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print(format_review_report(report))
    print(f"\nwrote {out}" + (f" and the pair lists in {cfg.pairs_out}" if cfg.pairs_out else ""))
    return report


def _parse(argv: Sequence[str] | None) -> ReviewReportConfig:
    ap = argparse.ArgumentParser(description="Report a PoporoIN pair review and write the accepted pairs.")
    ap.add_argument("--db", required=True, help="SQLite review database")
    ap.add_argument("--out", default=None, help="JSON report path (default <db>.report.json)")
    ap.add_argument("--pairs-out", default=None, help="folder for the accepted pair lists")
    ap.add_argument("--min-reviews", type=int, default=2, help="answers a pair needs (default 2)")
    ap.add_argument("--allow-open", action="store_true", help="write pair lists despite unsettled pairs")
    a = ap.parse_args(argv)
    return ReviewReportConfig(db=a.db, out=a.out, pairs_out=a.pairs_out, min_reviews=a.min_reviews,
                              allow_open=a.allow_open)


if __name__ == "__main__":  # pragma: no cover
    main(_parse(None))
