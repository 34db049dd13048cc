"""Report of a human audit: precision per stratum, agreement and the corpus-weighted estimate.

``python -m eval_jobs.audit_report --db verdicts.sqlite --corpus runs/synthetic [--out report.json]``

Reads the verdict store written by the audit page, re-derives the corpus composition from the
corpus itself (and refuses a corpus that is not the one the batch was drawn from), prints the
tables and writes the JSON report (default: next to the database, ``<db>.report.json``).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any, Sequence

from pydantic import Field

from relate.audit.report import format_audit_report, report_from_store
from relate.audit.sampler import AuditSampleConfig, verify_corpus
from relate.audit.store import open_verdict_store
from relate.config import StrictConfig
from relate.data.corpus import read_corpus
from relate.data.corpus import require_corpus
from relate.job_inputs import one_line_errors, require_path

__all__ = ["AuditReportConfig", "main"]


class AuditReportConfig(StrictConfig):
    """Inputs and output of the audit report."""

    db: str = Field(..., description="SQLite verdict database written by serve_apps.audit_app.")
    corpus: str = Field(..., description="Corpus folder the audited batch was drawn from.")
    out: str | None = Field(None, description="JSON report path; default <db>.report.json.")
    confidence: float = Field(0.95, gt=0, lt=1, description="Confidence level of every interval.")


def _clean(x: Any) -> Any:
    """NaN is not JSON: write null instead."""
    if isinstance(x, float) and math.isnan(x):
        return None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_clean(v) for v in x]
    return x


def main(cfg: AuditReportConfig) -> dict[str, Any]:
    """Build, print and write the report; returns it."""
    db = Path(cfg.db)
    require_path(db, "verdict database (--db)", "python -m serve_apps.audit_app --corpus CORPUS --batch batch.json "
                 f"--db {db} (the audit page; docs/jobs/audit.md)")
    require_corpus(cfg.corpus, "audited corpus (--corpus)")
    if not db.is_file():
        raise FileNotFoundError(f"verdict database not found: {db}")
    store = open_verdict_store(db)
    try:
        meta = store.batch_meta()
        sample_cfg = AuditSampleConfig.model_validate(meta["config"])
        strata = verify_corpus(read_corpus(cfg.corpus), sample_cfg, meta["fingerprint"])
        report = _clean(report_from_store(store, strata, cfg.confidence))
    finally:
        store.close()
    out = Path(cfg.out) if cfg.out else db.with_name(db.name + ".report.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print(format_audit_report(report))
    print(f"\nwrote {out}")
    return report


def _parse(argv: Sequence[str] | None) -> AuditReportConfig:
    ap = argparse.ArgumentParser(description="Report precision of a human corpus audit.")
    ap.add_argument("--db", required=True, help="SQLite verdict database")
    ap.add_argument("--corpus", required=True, help="corpus folder the batch was drawn from")
    ap.add_argument("--out", default=None, help="JSON report path (default <db>.report.json)")
    ap.add_argument("--confidence", type=float, default=0.95, help="interval confidence level")
    a = ap.parse_args(argv)
    return AuditReportConfig(db=a.db, corpus=a.corpus, out=a.out, confidence=a.confidence)


if __name__ == "__main__":  # pragma: no cover
    one_line_errors("eval_jobs.audit_report")
    main(_parse(None))
