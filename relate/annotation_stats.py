"""Statistics of an annotated corpus in the style of seed 001, Table 20 and §4.2, plus gate scoring.

Corpus side: the Table-20 statistics of ``relate.corpus_stats`` (one definition: relations per
image over all images, entropy in nats), and the direction balance of left/right, above/below
and front/behind. Gate side: rejections per rule, unusable outputs per reason, and, when the
annotator injected labelled errors, precision and recall of rejection per error kind. Run side:
images rejected before annotation (per :data:`IMAGE_RULES`), and the VLM calls made, retried and
failed by kind, including failures still waiting for a rerun.
"""

from __future__ import annotations

from collections import Counter
from typing import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from relate.corpus_stats import corpus_statistics
from relate.data.gate_hard_cases import HARD_TAG, format_hard_case_table, score_hard_cases
from relate.gate_canonical import default_map

__all__ = ["IMAGE_RULES", "vlm_call_stats", "format_vlm_line", "corpus_table20", "direction_balance", "gate_scoring", "geometry_audit", "annotation_statistics",
           "format_annotation_table"]

# image-level rejection rules: the image never reached the VLM (subject = object = -1 in the row)
IMAGE_RULES = ("image_missing", "image_truncated", "image_undecodable", "image_size_mismatch", "boxes_outside_image")

_EXPECT = {  # the gate decision each injected error kind should receive
    "contact_disjoint": "rejected:contact_disjoint", "containment_no_overlap": "rejected:containment_no_overlap",
    "proximity_far": "rejected:proximity_far", "wrong_direction": "swapped", "not_layout": "rejected:not_layout",
    "body_part_spatial": "rejected:body_part_spatial", "body_part_subject": "rejected:body_part_subject",
    "body_part_object": "rejected:body_part_object", "semantic_disjoint": "rejected:semantic_disjoint",
    "person_duplicate": "rejected:person_duplicate", "bad_index": "rejected:bad_index",
    "repeated_pair": "rejected:duplicate", "depth_flip": "unchecked",
}


def corpus_table20(table: pa.Table) -> dict:
    """Table-20 columns plus degree, connectivity and pass shares: ``relate.corpus_stats``."""
    return corpus_statistics(table)


def direction_balance(predicates: list[str]) -> dict:
    """Counts of each side of left/right, above/below, front/behind and their relative gap."""
    cm = default_map()
    cnt: Counter = Counter()
    for p in predicates:
        cid, rev = cm.lookup(p)
        if cid >= 0 and not rev and cm.forms[cid].inverse is not None:
            cnt[cm.forms[cid].name] += 1
    out = {}
    for a, b in (("left of", "right of"), ("above", "below"), ("in front of", "behind")):
        na, nb = cnt[a], cnt[b]
        out[f"{a}/{b}"] = {a: na, b: nb, "rel_gap": abs(na - nb) / max(na, nb, 1)}
    return out


def gate_scoring(tags: Mapping[str, Mapping[str, int]], rules_on_clean: Mapping[str, int]) -> dict:
    """Per injected kind: recall (share given the expected decision) and what else happened;
    per rule: precision (share of its firings that hit an injected error)."""
    per_kind = {}
    fired: Counter = Counter(rules_on_clean)
    on_err: Counter = Counter()
    for kind, res in sorted(tags.items()):
        n = sum(res.values())
        expect = _EXPECT.get(kind)
        rejected = sum(v for k, v in res.items() if k.startswith("rejected:"))
        # recall: the right kind of decision (any rejection for a rejectable error, a swap for a
        # reversed direction, passing unchecked for what geometry cannot see)
        if expect == "unchecked":  # geometry cannot decide it: the right outcome is to let it through
            right = res.get("unchecked", 0) + res.get("passed", 0)
        else:
            right = rejected if expect and expect.startswith("rejected:") else res.get(expect, 0)
        per_kind[kind] = {"injected": n, "expected": expect, "recall": right / n if n and expect else None,
                          "expected_rule_share": res.get(expect, 0) / n if n and expect else None,
                          "outcomes": dict(res)}
        for k, v in res.items():
            if k.startswith("rejected:"):
                fired[k[9:]] += v
                on_err[k[9:]] += v
    per_rule = {r: {"fired": fired[r], "on_injected": on_err[r], "precision": on_err[r] / fired[r]}
                for r in sorted(fired)}
    return {"per_error_kind": per_kind, "per_rule": per_rule}


def geometry_audit(table: pa.Table) -> dict:
    """The post-gate guarantees of §4.1, measured on the written corpus: containment and contact
    relations on disjoint boxes, duplicate triples, self-loops."""
    from relate import geometry as G

    cm = default_map()
    n = {"contact": 0, "contact_disjoint": 0, "containment": 0, "containment_disjoint": 0, "duplicate_triples": 0,
         "self_loops": 0}
    for boxes, rels in zip(table.column("boxes").to_pylist(), table.column("relations").to_pylist()):
        b = np.array([[x["x1"], x["y1"], x["x2"], x["y2"]] for x in boxes], float).reshape(-1, 4)
        triples = [(r["subject"], r["predicate"], r["object"]) for r in rels]
        n["duplicate_triples"] += len(triples) - len(set(triples))
        for s, p, o in triples:
            n["self_loops"] += s == o
            cid, _ = cm.lookup(p)
            if cid < 0:
                continue
            f = cm.forms[cid]
            disjoint = bool(G.gap(b[s], b[o]) > 0)
            if f.contact:
                n["contact"] += 1
                n["contact_disjoint"] += disjoint
            if f.kind == "containment":
                n["containment"] += 1
                n["containment_disjoint"] += disjoint
    n["contact_disjoint_share"] = n["contact_disjoint"] / max(n["contact"], 1)
    n["containment_disjoint_share"] = n["containment_disjoint"] / max(n["containment"], 1)
    return n


def annotation_statistics(kept: pa.Table, rejected: pa.Table | None, counters: Mapping) -> dict:
    """Everything the run reports: Table-20 corpus stats, balance, rejections, parsing, scoring."""
    stats = corpus_table20(kept)
    flat = pc.list_flatten(kept.column("relations")).to_pylist() if kept.num_rows else []
    stats["direction_balance"] = direction_balance([r["predicate"] for r in flat])
    stats["geometry_audit"] = geometry_audit(kept)
    stats["gate_outcomes"] = dict(Counter(r["gate"] for r in flat))
    rej = pc.list_flatten(rejected.column("rejected")).to_pylist() if rejected is not None and rejected.num_rows else []
    stats["images_rejected"] = dict(sorted(Counter(r["rule"] for r in rej if r["rule"] in IMAGE_RULES).items()))
    rej = [r for r in rej if r["rule"] not in IMAGE_RULES]
    stats["rejections_per_rule"] = dict(sorted(Counter(r["rule"] for r in rej).items()))
    n_cand = len(flat) + len(rej)
    stats["candidates"] = n_cand
    stats["rejected_share"] = len(rej) / max(n_cand, 1)
    stats["unchecked_share_of_kept"] = counters.get("unchecked", 0) / max(len(flat), 1)
    stats["outputs"] = dict(counters.get("outputs", {}))
    stats["unusable_outputs"] = dict(counters.get("unusable", {}))
    stats["item_problems"] = dict(counters.get("item_problems", {}))
    stats["vlm"] = vlm_call_stats(counters)
    tags = counters.get("tags") or {}
    plain = {k: v for k, v in tags.items() if not k.startswith(HARD_TAG)}
    if plain:
        stats["gate_scoring"] = gate_scoring(plain, counters.get("rules_on_clean", {}))
    if len(plain) < len(tags):  # relations on both sides of each threshold (relate.data.gate_hard_cases)
        stats["gate_hard_cases"] = score_hard_cases(tags)
    return stats


def vlm_call_stats(counters: Mapping, outstanding: Mapping[str, int] | None = None) -> dict:
    """Calls per pass, attempts, retries, calls that failed after their retries by kind (over every
    run, including those a later run retried successfully) and failures still outstanding."""
    v = counters.get("vlm", {})
    calls = dict(sorted(v.get("calls", {}).items()))
    return {"calls": sum(calls.values()), "calls_per_pass": calls, "attempts": int(v.get("attempts", 0)),
            "retries": int(v.get("retries", 0)), "failed_calls": dict(sorted(v.get("failed_calls", {}).items())),
            "outstanding_failures": dict(sorted((outstanding or {}).items()))}


def format_vlm_line(vlm: Mapping) -> str:
    """``calls 120, retries 9, failed 4 (timeout 3, http_500 1), outstanding 1`` for progress lines."""
    failed = vlm.get("failed_calls", {})
    out = vlm.get("outstanding_failures", {})
    kinds = ", ".join(f"{k} {n}" for k, n in failed.items())
    return (f"calls {vlm.get('calls', 0)}, retries {vlm.get('retries', 0)}, failed {sum(failed.values())}"
            + (f" ({kinds})" if kinds else "") + f", outstanding {sum(out.values())}")


def format_annotation_table(stats: Mapping) -> str:
    """An aligned text table for the terminal."""
    lines = ["annotation run", "-" * 60]
    for k in ("images", "images_with_relations", "relations", "relations_per_image", "distinct_predicates",
              "predicate_entropy_nats",
              "mean_object_degree", "single_component_share", "candidates", "rejected_share"):
        v = stats.get(k)
        lines.append(f"{k:<28}{v:>14.3f}" if isinstance(v, float) else f"{k:<28}{v!s:>14}")
    lines.append("pass share: " + ", ".join(f"{k} {v:.1%}" for k, v in stats.get("pass_share", {}).items()))
    for axis, d in stats.get("direction_balance", {}).items():
        a, b = axis.split("/")
        lines.append(f"balance {axis:<22} {d[a]:>7} vs {d[b]:<7} gap {d['rel_gap']:.2%}")
    au = stats.get("geometry_audit")
    if au:
        lines.append(f"after gating: contact on disjoint boxes {au['contact_disjoint_share']:.2%} of {au['contact']}, "
                     f"containment {au['containment_disjoint_share']:.2%} of {au['containment']}, "
                     f"duplicate triples {au['duplicate_triples']}, self-loops {au['self_loops']}")
    lines.append("rejections: " + ", ".join(f"{k} {v}" for k, v in stats.get("rejections_per_rule", {}).items()))
    if stats.get("vlm"):
        lines.append("vlm: " + format_vlm_line(stats["vlm"]))
    if stats.get("images_rejected"):
        lines.append("images rejected: " + ", ".join(f"{k} {v}" for k, v in stats["images_rejected"].items()))
    if stats.get("unusable_outputs"):
        lines.append("unusable outputs: " + ", ".join(f"{k} {v}" for k, v in stats["unusable_outputs"].items()))
    sc = stats.get("gate_scoring")
    if sc:
        lines.append(f"{'injected error':<24}{'n':>6}{'recall':>8}  expected")
        for kind, d in sc["per_error_kind"].items():
            rec = "-" if d["recall"] is None else f"{d['recall']:.3f}"
            lines.append(f"{kind:<24}{d['injected']:>6}{rec:>8}  {d['expected']}")
        lines.append(f"{'rule':<24}{'fired':>6}{'precision':>10}")
        for rule, d in sc["per_rule"].items():
            lines.append(f"{rule:<24}{d['fired']:>6}{d['precision']:>10.3f}")
    if stats.get("gate_hard_cases"):
        lines.append(format_hard_case_table(stats["gate_hard_cases"]))
    return "\n".join(lines)
