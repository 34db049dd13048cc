"""Audit report: precision per stratum with Wilson intervals, agreement, corpus-level estimate.

Units. An item's label is the majority of the definite verdicts (true/false) its auditors gave;
ties and unsure-only items are unresolved and leave the precision denominators (they are counted
separately). Precision = true / (true + false) over resolved items.

Corpus estimate. The batch over-samples small strata on purpose (equal allocation), so the sample
mean is not the corpus precision. The stratified estimator re-weights each stratum by its share of
the corpus, W_h = N_h / N: P = sum_h W_h p_h over the covered strata (renormalised, with the
covered share reported). Its interval is a normal interval whose stratum variances use the
Agresti-Coull adjusted proportion p~ = (k + z^2/2) / (n + z^2) over n + z^2 (so a stratum with
p = 1 still has width), times the finite-population correction (N_h - n_h) / (N_h - 1).
"""

from __future__ import annotations

import math
import warnings
from itertools import combinations
from statistics import NormalDist
from typing import Any, Iterable, Mapping, Sequence

from relate.audit.sampler import STRATUM_KEYS
from relate.audit.store import VERDICTS, VerdictStore

__all__ = ["wilson_interval", "item_labels", "agreement", "stratified_estimate", "build_audit_report",
           "report_from_store", "format_audit_report"]


def _z(confidence: float) -> float:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence {confidence!r} must lie strictly between 0 and 1")
    return NormalDist().inv_cdf(0.5 + confidence / 2.0)


def wilson_interval(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for k successes in n trials; (nan, nan) when n == 0."""
    if n < 0 or k < 0 or k > n:
        raise ValueError(f"wilson_interval: need 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return (math.nan, math.nan)
    z = _z(confidence)
    p = k / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (max(0.0, centre - half), min(1.0, centre + half))


def item_labels(verdicts: Iterable[tuple[str, str, str]]) -> dict[str, str | None]:
    """Per item: 'true' / 'false' by majority of definite verdicts, None when tied or all unsure."""
    votes: dict[str, list[int]] = {}
    for _, item, v in verdicts:
        t_f = votes.setdefault(item, [0, 0])
        if v == "true":
            t_f[0] += 1
        elif v == "false":
            t_f[1] += 1
    return {i: ("true" if t > f else "false" if f > t else None) for i, (t, f) in votes.items()}


def agreement(verdicts: Sequence[tuple[str, str, str]]) -> list[dict[str, Any]]:
    """Cohen's kappa over every pair of auditors on the items both judged (labels true/false/unsure)."""
    from sklearn.metrics import cohen_kappa_score  # deferred: sklearn costs ~1 s to import

    by: dict[str, dict[str, str]] = {}
    for a, item, v in verdicts:
        by.setdefault(a, {})[item] = v
    out = []
    for a, b in combinations(sorted(by), 2):
        common = sorted(set(by[a]) & set(by[b]))
        if not common:
            continue
        ya, yb = [by[a][i] for i in common], [by[b][i] for i in common]
        with warnings.catch_warnings():  # a constant pair of raters makes kappa 0/0: report null
            warnings.simplefilter("ignore")
            kappa = round(float(cohen_kappa_score(ya, yb, labels=list(VERDICTS))), 12) + 0.0  # no "-0.000"
        out.append({"auditors": [a, b], "items": len(common),
                    "observed_agreement": sum(x == y for x, y in zip(ya, yb)) / len(common),
                    "kappa": None if math.isnan(kappa) else kappa})
    return out


def _cell(k: int, n: int, confidence: float) -> dict[str, Any]:
    lo, hi = wilson_interval(k, n, confidence)
    return {"true": k, "false": n - k, "n": n, "precision": (k / n) if n else None,
            "ci": [None, None] if n == 0 else [lo, hi]}


def stratified_estimate(cells: Mapping[str, tuple[int, int]], corpus_strata: Mapping[str, int],
                        confidence: float = 0.95) -> dict[str, Any]:
    """Corpus-weighted precision from per-stratum (true, resolved) counts; see the module docstring."""
    total = sum(corpus_strata.values())
    unknown = sorted(set(cells) - set(corpus_strata))
    if unknown:
        raise ValueError(f"stratified_estimate: strata {unknown[:3]} are not in the corpus composition")
    covered = {h: kn for h, kn in cells.items() if kn[1] > 0}
    cover_w = sum(corpus_strata[h] for h in covered) / total if total else 0.0
    if not covered:
        return {"precision": None, "ci": [None, None], "covered_weight": cover_w, "strata_covered": 0}
    z = _z(confidence)
    wsum = sum(corpus_strata[h] for h in covered)
    est = var = 0.0
    for h, (k, n) in covered.items():
        w, big_n = corpus_strata[h] / wsum, corpus_strata[h]
        p_adj = (k + z * z / 2) / (n + z * z)
        fpc = (big_n - n) / (big_n - 1) if big_n > 1 else 0.0
        est += w * k / n
        var += w * w * p_adj * (1 - p_adj) / (n + z * z) * max(fpc, 0.0)
    half = z * math.sqrt(var)
    return {"precision": est, "ci": [max(0.0, est - half), min(1.0, est + half)],
            "covered_weight": cover_w, "strata_covered": len(covered)}


def build_audit_report(items: Sequence[Mapping[str, Any]], verdicts: Sequence[tuple[str, str, str]],
                       corpus_strata: Mapping[str, int], confidence: float = 0.95) -> dict[str, Any]:
    """The whole report as a JSON-ready dict (items as stored by the verdict store)."""
    labels = item_labels(verdicts)
    by_item = {it["item_id"]: it for it in items}
    stray = sorted(set(labels) - set(by_item))
    if stray:
        raise ValueError(f"verdicts on item(s) not in the batch: {stray[:3]}")
    total = sum(corpus_strata.values())
    strata: dict[str, dict[str, Any]] = {}
    for it in items:
        s = strata.setdefault(it["stratum"], {"stratum": it["stratum"], **{k: it[k] for k in STRATUM_KEYS},
                                              "batch_items": 0, "k": 0, "n": 0, "unresolved": 0})
        s["batch_items"] += 1
        lab = labels.get(it["item_id"], "missing")
        if lab in ("true", "false"):
            s["n"] += 1
            s["k"] += lab == "true"
        elif lab is None:
            s["unresolved"] += 1
    rows = []
    for name in sorted(strata):
        s = strata.pop(name)
        k, n = s.pop("k"), s.pop("n")
        n_h = int(corpus_strata.get(name, 0))
        rows.append({**s, **_cell(k, n, confidence), "corpus_relations": n_h, "weight": n_h / total if total else 0.0})
    cells = {r["stratum"]: (r["true"], r["n"]) for r in rows}
    return {
        "confidence": confidence,
        "batch_items": len(items),
        "judged_items": len(labels),
        "unresolved_items": sum(1 for v in labels.values() if v is None),
        "overall": _cell(sum(r["true"] for r in rows), sum(r["n"] for r in rows), confidence),
        "corpus_estimate": stratified_estimate(cells, corpus_strata, confidence),
        "strata": rows,
        "by": {dim: _marginal(rows, dim, corpus_strata, confidence) for dim in STRATUM_KEYS},
        "auditors": _per_auditor(verdicts, confidence),
        "agreement": agreement(verdicts),
    }


def _marginal(rows: list[dict[str, Any]], dim: str, corpus_strata: Mapping[str, int],
              confidence: float) -> list[dict[str, Any]]:
    """Pooled sample counts per value of one dimension, plus the corpus-weighted estimate inside it."""
    out = []
    for value in sorted({r[dim] for r in rows}):
        sub = [r for r in rows if r[dim] == value]
        k, n = sum(r["true"] for r in sub), sum(r["n"] for r in sub)
        est = stratified_estimate({r["stratum"]: (r["true"], r["n"]) for r in sub},
                                  {r["stratum"]: corpus_strata.get(r["stratum"], 0) for r in sub}, confidence)
        out.append({dim: value, **_cell(k, n, confidence), "weighted": est["precision"], "weighted_ci": est["ci"]})
    return out


def _per_auditor(verdicts: Sequence[tuple[str, str, str]], confidence: float) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for a in sorted({v[0] for v in verdicts}):
        mine = [v for (x, _, v) in verdicts if x == a]
        counts = {v: mine.count(v) for v in VERDICTS}
        out[a] = {"judged": len(mine), "counts": counts,
                  **{k: v for k, v in _cell(counts["true"], counts["true"] + counts["false"], confidence).items()
                     if k in ("precision", "ci")}}
    return out


def report_from_store(store: VerdictStore, corpus_strata: Mapping[str, int] | None = None,
                      confidence: float = 0.95) -> dict[str, Any]:
    """Report over everything in the store; corpus composition from the batch unless given."""
    strata = corpus_strata if corpus_strata is not None else store.batch_meta()["corpus_strata"]
    return build_audit_report(store.items(), store.live_verdicts(), strata, confidence)


def _fmt(p: float | None, ci: Sequence[float | None]) -> str:
    if p is None:
        return "      -"
    return f"{p:6.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"


def format_audit_report(report: Mapping[str, Any]) -> str:
    """Plain-text tables for the terminal."""
    c = report["confidence"]
    ov, est = report["overall"], report["corpus_estimate"]
    lines = [f"audit: {report['judged_items']}/{report['batch_items']} items judged, "
             f"{report['unresolved_items']} unresolved; intervals at {c:.0%}",
             f"sample precision      {_fmt(ov['precision'], ov['ci'])}  (n={ov['n']}, Wilson)",
             f"corpus-weighted       {_fmt(est['precision'], est['ci'])}  "
             f"(covers {est['covered_weight']:.1%} of corpus relations)", "",
             f"{'stratum':58s} {'N':>7s} {'n':>4s} {'precision [CI]':>24s}"]
    for r in report["strata"]:
        lines.append(f"{r['stratum']:58s} {r['corpus_relations']:7d} {r['n']:4d} {_fmt(r['precision'], r['ci']):>24s}")
    lines.append("")
    for dim, rows in report["by"].items():
        lines.append(f"by {dim}: " + "; ".join(f"{r[dim]} {_fmt(r['precision'], r['ci']).strip()} n={r['n']}"
                                               for r in rows))
    lines.append("")
    for a, s in report["auditors"].items():
        lines.append(f"auditor {a}: {s['judged']} judged {s['counts']}, precision {_fmt(s['precision'], s['ci']).strip()}")
    for g in report["agreement"]:
        kappa = "undefined" if g["kappa"] is None else f"{g['kappa']:.3f}"
        lines.append(f"agreement {g['auditors'][0]} vs {g['auditors'][1]}: kappa {kappa} on {g['items']} items "
                     f"(observed {g['observed_agreement']:.3f})")
    return "\n".join(lines)
