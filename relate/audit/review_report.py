"""Report of the PoporoIN pair review: agreement between reviewers, disagreements to resolve, and
the accepted pairs written as the pair lists ``pipelines.poporo_in`` reads.

A pair is settled when a resolver has decided it (the latest resolution counts), or when it has at
least ``min_reviews`` answers that all give the same decision (accept, or reject whatever the
reasons). Answers that differ on accept/reject are a disagreement until resolved; two rejections
for different reasons are listed apart (the pair is out either way, but the reasons disagree).

Agreement is Cohen's kappa (scikit-learn's ``cohen_kappa_score``) for every two reviewers over the
pairs both answered, on two label sets: the decision (accept / reject) and the category (accept or
one of the three rejection reasons). The reasons alone are also compared on the pairs both
rejected. Seed 000 reports no inter-annotator agreement for PoporoIN (Sec. 6): this is that number.
"""

from __future__ import annotations

import json
import math
import warnings
from itertools import combinations
from pathlib import Path
from typing import Any, Mapping, Sequence

from relate.audit.review_store import CELLS, DECISIONS, REJECT_REASONS, ReviewStore

__all__ = ["CATEGORIES", "category_of", "review_kappa", "review_agreement", "build_review_report",
           "review_report_from_store", "write_accepted_pairs", "format_review_report"]

CATEGORIES = ("accept", *REJECT_REASONS)


def category_of(answer: Mapping[str, Any]) -> str:
    """'accept' or the rejection reason: the four-way label of one answer."""
    return "accept" if answer["decision"] == "accept" else str(answer["reason"])


def review_kappa(ya: Sequence[str], yb: Sequence[str], labels: Sequence[str]) -> float | None:
    """Cohen's kappa of two raters (scikit-learn); None when undefined (no items, or 0/0)."""
    if not ya:
        return None
    from sklearn.metrics import cohen_kappa_score  # deferred: sklearn costs ~1 s to import

    with warnings.catch_warnings():  # two constant raters make kappa 0/0: report None
        warnings.simplefilter("ignore")
        kappa = float(cohen_kappa_score(list(ya), list(yb), labels=list(labels)))
    return None if math.isnan(kappa) else round(kappa, 12) + 0.0


def review_agreement(answers: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Kappa for every two reviewers on the pairs both answered (see the module docstring)."""
    by: dict[str, dict[str, Mapping[str, Any]]] = {}
    for a in answers:
        by.setdefault(a["reviewer"], {})[a["pair_id"]] = a
    out = []
    for r1, r2 in combinations(sorted(by), 2):
        common = [p for p in by[r1] if p in by[r2]]
        if not common:
            continue
        dec = ([by[r1][p]["decision"] for p in common], [by[r2][p]["decision"] for p in common])
        cat = ([category_of(by[r1][p]) for p in common], [category_of(by[r2][p]) for p in common])
        both = [p for p in common if by[r1][p]["decision"] == by[r2][p]["decision"] == "reject"]
        rea = ([by[r1][p]["reason"] for p in both], [by[r2][p]["reason"] for p in both])
        out.append({
            "reviewers": [r1, r2], "pairs": len(common),
            "decision": {"observed": sum(x == y for x, y in zip(*dec)) / len(common),
                         "kappa": review_kappa(*dec, DECISIONS)},
            "category": {"observed": sum(x == y for x, y in zip(*cat)) / len(common),
                         "kappa": review_kappa(*cat, CATEGORIES)},
            "reason_when_both_reject": {"pairs": len(both),
                                        "observed": sum(x == y for x, y in zip(*rea)) / len(both) if both else None,
                                        "kappa": review_kappa(*rea, tuple(REJECT_REASONS))},
        })
    return out


def build_review_report(pairs: Sequence[Mapping[str, Any]], answers: Sequence[Mapping[str, Any]],
                        resolutions: Mapping[str, Mapping[str, Any]], min_reviews: int = 2) -> dict[str, Any]:
    """The whole report as a JSON-ready dict (pairs, answers and resolutions as the store gives them)."""
    if min_reviews < 1:
        raise ValueError(f"min_reviews must be at least 1, got {min_reviews}")
    by_pair: dict[str, dict[str, Mapping[str, Any]]] = {}
    for a in answers:
        by_pair.setdefault(a["pair_id"], {})[a["reviewer"]] = a
    known = {p["pair_id"] for p in pairs}
    stray = sorted((set(by_pair) | set(resolutions)) - known)
    if stray:
        raise ValueError(f"answers on pair(s) not in the proposals table: {stray[:3]}")
    rows, disagreements, reason_differences = [], [], []
    for p in pairs:
        mine = by_pair.get(p["pair_id"], {})
        seen = {r: {"decision": a["decision"], "reason": a["reason"]} for r, a in sorted(mine.items())}
        decisions = {a["decision"] for a in mine.values()}
        res = resolutions.get(p["pair_id"])
        base = {k: p[k] for k in ("pair_id", "cell", "class_a", "class_b")}
        if res is not None:
            final, reason, status = res["decision"], res["reason"], "resolved"
        elif len(decisions) > 1:
            final, reason, status = None, None, "disagreement"
        elif len(mine) < min_reviews:
            final, reason, status = None, None, "pending"
        else:
            final, status = decisions.pop(), "agreed"
            reasons = {a["reason"] for a in mine.values()}
            reason = reasons.pop() if len(reasons) == 1 else None
        if len({a["decision"] for a in mine.values()}) > 1:
            disagreements.append({**base, "answers": seen, "resolution": None if res is None else dict(res)})
        elif len({a["reason"] for a in mine.values()}) > 1:
            reason_differences.append({**base, "answers": seen})
        rows.append({**base, "models": list(p.get("models", [])), "answers": seen, "status": status,
                     "final": final, "reason": reason})
    reviewers = sorted({a["reviewer"] for a in answers})
    accepted = {c: [[r["class_a"], r["class_b"]] for r in rows if r["cell"] == c and r["final"] == "accept"]
                for c in CELLS}
    status_counts = {s: sum(r["status"] == s for r in rows) for s in ("agreed", "resolved", "disagreement", "pending")}
    return {
        "pairs": len(rows), "min_reviews": min_reviews, "status": status_counts,
        "open": status_counts["disagreement"] + status_counts["pending"],
        "reviewers": {r: {"reviewed": sum(a["reviewer"] == r for a in answers),
                          "counts": {c: sum(a["reviewer"] == r and category_of(a) == c for a in answers)
                                     for c in CATEGORIES}} for r in reviewers},
        "agreement": review_agreement(answers),
        "disagreements": disagreements,
        "reason_differences": reason_differences,
        "accepted": accepted,
        "rejected_by_reason": {k: sum(r["final"] == "reject" and r["reason"] == k for r in rows) for k in REJECT_REASONS},
        "decisions": rows,
    }


def review_report_from_store(store: ReviewStore, min_reviews: int = 2) -> dict[str, Any]:
    """Report over everything in the review store."""
    return build_review_report(store.pairs(), store.live_answers(), store.resolutions(), min_reviews)


def write_accepted_pairs(report: Mapping[str, Any], out_dir: str | Path, allow_open: bool = False) -> dict[str, str]:
    """Write ``<out_dir>/<cell>.txt`` ('a,b' per line) for every cell with accepted pairs, the
    format ``relate.data.poporo.read_pair_list`` reads, and ``pairs.json`` mapping each written
    cell to its file (the ``pairs`` block of ``pipelines.poporo_in``'s config). Refuses while pairs
    are pending or disagreed unless ``allow_open``; returns the mapping."""
    if report["open"] and not allow_open:
        raise ValueError(f"{report['status']['disagreement']} disagreement(s) and {report['status']['pending']} "
                         "pending pair(s) are not settled: resolve them first (or pass allow_open to write "
                         "the settled pairs only)")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written: dict[str, str] = {}
    for cell in CELLS:
        lines = report["accepted"].get(cell, [])
        if not lines:
            continue
        path = out / f"{cell}.txt"
        path.write_text(f"# {cell}: {len(lines)} pair(s) accepted in review\n" +
                        "".join(f"{a},{b}\n" for a, b in lines))
        written[cell] = str(path.resolve())
    (out / "pairs.json").write_text(json.dumps(written, indent=1))
    return written


def _k(x: float | None) -> str:
    return "undefined" if x is None else f"{x:.3f}"


def format_review_report(report: Mapping[str, Any]) -> str:
    """Plain-text summary for the terminal."""
    s = report["status"]
    lines = [f"review: {report['pairs']} pairs; {s['agreed']} agreed, {s['resolved']} resolved, "
             f"{s['disagreement']} disagreements open, {s['pending']} pending (<{report['min_reviews']} answers)"]
    for r, v in report["reviewers"].items():
        lines.append(f"reviewer {r}: {v['reviewed']} answered {v['counts']}")
    for g in report["agreement"]:
        a, b = g["reviewers"]
        lines.append(f"{a} vs {b} on {g['pairs']} pairs: kappa accept/reject {_k(g['decision']['kappa'])} "
                     f"(observed {g['decision']['observed']:.3f}), kappa accept+reasons {_k(g['category']['kappa'])} "
                     f"(observed {g['category']['observed']:.3f}), kappa of reasons when both reject "
                     f"{_k(g['reason_when_both_reject']['kappa'])} on {g['reason_when_both_reject']['pairs']}")
    for d in report["disagreements"]:
        said = "; ".join(f"{r} {x['decision']}{' (' + x['reason'] + ')' if x['reason'] else ''}"
                         for r, x in d["answers"].items())
        done = f" -> resolved {d['resolution']['decision']} by {d['resolution']['resolver']}" if d["resolution"] else ""
        lines.append(f"disagreement {d['pair_id']} [{d['cell']}] {d['class_a']} / {d['class_b']}: {said}{done}")
    lines.append("accepted per cell: " + ", ".join(f"{c} {len(v)}" for c, v in report["accepted"].items()))
    return "\n".join(lines)
