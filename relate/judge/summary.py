"""From audit rows to Tab. 7: Eq. 4 per system and depth, the corruption control, the KT check.

Everything reported is recomputed from the audit table, so a reader can re-derive any number
from the calls that produced it. The headline A5 value of a system is its matched-depth Eq. 4
divided by the annotation's own bits on the same images (§ 6.5: the cell that enters the
composite, since at deployed depth the ratio is not bounded by one).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Mapping, Sequence

import numpy as np

from relate.judge.information import build_reference, judged_information, shared_vocabulary
from relate.judge.kt import kt_bits_per_image
from relate.judge.protocol import DEPTHS

__all__ = ["binomial", "summarise_relation_arm", "table7_markdown", "VERDICT_BOOL"]

VERDICT_BOOL = {"yes": True, "no": False}


def binomial(k: int, n: int, level: float = 0.95) -> dict:
    """Rate with its exact (Clopper-Pearson) interval; rate None when n = 0."""
    from scipy.stats import binomtest

    if n == 0:
        return {"k": 0, "n": 0, "rate": None, "low": None, "high": None}
    ci = binomtest(k, n).proportion_ci(confidence_level=level, method="exact")
    return {"k": int(k), "n": int(n), "rate": k / n, "low": float(ci.low), "high": float(ci.high)}


def _accept_rate(rows: Sequence[Mapping[str, Any]]) -> dict:
    parsed = [r for r in rows if r["verdict"] in VERDICT_BOOL]
    return binomial(sum(1 for r in parsed if r["verdict"] == "yes"), len(parsed))


def _controls(rows: Sequence[Mapping[str, Any]]) -> dict:
    corr = [r for r in rows if r["kind"] == "corruption"]
    asserted = [r for r in rows if r["kind"] == "asserted"]
    return {
        # pooled: every corruption (an upper bound on false acceptance, D.8.1)
        "corruption_acceptance": _accept_rate(corr),
        # with ground truth: corruptions that really are false, and asserted relations that are true
        "corruption_acceptance_false_only": _accept_rate([r for r in corr if r["truth"] is False]),
        "acceptance_of_true": _accept_rate([r for r in asserted if r["truth"] is True]),
        "acceptance_of_false": _accept_rate([r for r in asserted if r["truth"] is False]),
        "unparseable": sum(1 for r in rows if r["verdict"] is None),
    }


def summarise_relation_arm(rows: Sequence[Mapping[str, Any]], reference_counts: Mapping[str, int],
                           ground_truth: Mapping[str, Sequence[Mapping[str, Any]]], systems: Sequence[str],
                           kt_min_counts: Sequence[int] = (1, 3, 10),
                           vocabulary_sizes: Mapping[str, int | None] | None = None) -> dict:
    """Tab. 7 blocks per depth plus the A5 value per system.

    ``ground_truth`` maps every evaluated image id to its annotated relations (the denominator of
    the normalisation and the image count of every per-image figure).
    """
    rel = [r for r in rows if r["arm"] == "relation"]
    images = len(ground_truth)
    if images == 0:
        raise ValueError("no images to summarise")
    emitted = {s: [r["predicate"] for r in rel if r["system"] == s and r["kind"] == "asserted"] for s in systems}
    empty = [s for s, p in emitted.items() if not p]
    if empty:
        raise ValueError(f"system(s) {empty} asserted no relation on the judged images; Eq. 4 needs a shared vocabulary")
    reference = build_reference(reference_counts, shared_vocabulary(emitted))
    gt_preds = [t["predicate"] for rs in ground_truth.values() for t in rs]
    annotation = judged_information(gt_preds, [True] * len(gt_preds), reference, images)
    by: dict[tuple[str, str], list] = defaultdict(list)
    for r in rel:
        by[(r["depth"], r["system"])].append(r)
    present = {r["depth"] for r in rel}
    depths = [d for d in DEPTHS if d in present]  # Tab. 7 order: matched block first
    out: dict[str, Any] = {"images": images, "reference": {
        "vocabulary": sorted(reference.probs), "size": len(reference.probs),
        "excluded_reference_mass": reference.excluded_mass, "unpriced_shared_predicates": list(reference.missing)},
        "annotation": annotation.to_dict(), "depths": {}, "a5": {}}
    for depth in depths:
        block: dict[str, Any] = {"systems": {}, "controls": _controls([r for r in rel if r["depth"] == depth])}
        for s in systems:
            rs = by.get((depth, s), [])
            asserted = [r for r in rs if r["kind"] == "asserted"]
            verdicts = [VERDICT_BOOL.get(r["verdict"]) for r in asserted]
            info = judged_information([r["predicate"] for r in asserted], verdicts, reference, images)
            stream = [r["predicate"] for r, v in zip(asserted, verdicts) if v is True]
            vocab = (vocabulary_sizes or {}).get(s)
            block["systems"][s] = {
                **info.to_dict(),
                "share_of_annotation": info.bits_per_image / annotation.bits_per_image if annotation.bits else None,
                "acceptance": _accept_rate(asserted), "unparseable": sum(v is None for v in verdicts),
                "kt_bits_per_image": {str(m): kt_bits_per_image(stream, images, m, vocab) for m in kt_min_counts},
                "controls": _controls(rs)}
        out["depths"][depth] = block
    headline = "matched" if "matched" in out["depths"] else depths[0]
    out["a5_depth"] = headline
    out["a5"] = {s: out["depths"][headline]["systems"][s]["share_of_annotation"] for s in systems}
    return out


# --------------------------------------------------------------------------- Table 7


def _f(x: Any, nd: int = 2) -> str:
    return "—" if x is None or (isinstance(x, float) and not np.isfinite(x)) else f"{x:.{nd}f}"


def _control_line(c: dict) -> str:
    pooled, false_only = c["corruption_acceptance"], c["corruption_acceptance_false_only"]
    line = f"judge control at this depth: corruption acceptance {_f(pooled['rate'], 3)} pooled (n={pooled['n']})"
    if false_only["n"]:
        line += f", {_f(false_only['rate'], 3)} on corruptions false by ground truth (n={false_only['n']})"
    true_acc = c["acceptance_of_true"]
    if true_acc["n"]:
        line += f"; true relations accepted {_f(true_acc['rate'], 3)} (n={true_acc['n']})"
    return line + f"; unparseable answers {c['unparseable']}"


def table7_markdown(result: dict) -> str:
    """Tab. 7 layout: one block per depth with its own corruption control, then the graph arm."""
    rel = result["relation"]
    ann = rel["annotation"]
    lines = [f"A5 (Eq. 4), judge {result['judge']}, {result['rendering']} rendering, {rel['images']} images; "
             f"reference restricted to {rel['reference']['size']} shared predicates; annotation "
             f"{_f(ann['bits_per_image'])} bits/img; A5 = {rel['a5_depth']} bits / annotation bits "
             f"({result['a5_status']})", ""]
    for depth, block in rel["depths"].items():
        pools = "/".join(next(iter(block["systems"].values()))["kt_bits_per_image"]) if block["systems"] else ""
        lines += [f"**{depth} depth**", "",
                  "| model | asserted/img | accepted/img | bits/accepted | true bits/img | share of annotation "
                  f"| out-of-reference | KT bits/img (pooling {pools}) |", "|---|---|---|---|---|---|---|---|"]
        for name, s in block["systems"].items():
            kt = " / ".join(_f(v, 1) for v in s["kt_bits_per_image"].values())
            lines.append(f"| {name} | {_f(s['asserted_per_image'])} | {_f(s['accepted_per_image'])} | "
                         f"{_f(s['bits_per_accepted'])} | {_f(s['bits_per_image'], 1)} | "
                         f"{_f(s['share_of_annotation'])} | {_f(s['out_of_reference_share'])} | {kt} |")
        lines += ["", _control_line(block["controls"]), ""]
    g = result.get("graph")
    if g is not None:
        c = g["controls"]
        lines.append(f"whole-graph arm: {g['status']}; scramble accuracy {_f(c['scramble']['rate'])} "
                     f"({c['scramble']['decisive']} decisive of {c['scramble']['compared']}), padding resistance "
                     f"{_f(c['padding']['rate'])} ({c['padding']['decisive']} of {c['padding']['compared']}), "
                     f"primacy {_f(c['primacy'])}" + (f"; {'; '.join(g['reasons'])}" if g["reasons"] else ""))
        for pair, v in (g["verdicts"] or {}).items():
            a = pair.split("|")[0]
            lines.append(f"- {pair}: {a} wins {v['wins'][a]} of {v['decisive']} decisive ({v['compared']} compared)")
    return "\n".join(lines) + "\n"
