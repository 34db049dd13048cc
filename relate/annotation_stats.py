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
from typing import Iterable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from relate.corpus_stats import CorpusTally, corpus_statistics
from relate.data.gate_hard_cases import HARD_TAG, format_hard_case_table, score_hard_cases
from relate.gate_canonical import default_map

__all__ = ["IMAGE_RULES", "vlm_call_stats", "format_vlm_line", "pass_usage", "latency_percentiles", "throughput",
           "format_usage_line", "format_throughput_line", "corpus_table20", "direction_balance", "gate_scoring", "geometry_audit", "annotation_statistics", "AnnotationTally",
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


def direction_balance(predicates: Iterable[str]) -> dict:
    """Counts of each side of left/right, above/below, front/behind and their relative gap."""
    cm = default_map()
    cnt: Counter = Counter()
    for p in predicates:
        cid, rev = cm.lookup(p)
        if cid >= 0 and not rev and cm.forms[cid].inverse is not None:
            cnt[cm.forms[cid].name] += 1
    out = {}
    pairs = [(f.name, f.inverse) for f in cm.forms if f.inverse is not None and cm.index[f.name] < cm.index[f.inverse]]
    for a, b in pairs:
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


_AUDIT_COUNTS = ("contact", "contact_disjoint", "containment", "containment_disjoint", "duplicate_triples", "self_loops")


def _audit_counts(table: pa.Table) -> Counter:
    from relate import geometry as G

    cm = default_map()
    n: Counter = Counter({k: 0 for k in _AUDIT_COUNTS})
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
    return n


def _audit(n: Mapping[str, int]) -> dict:
    out = {k: int(n.get(k, 0)) for k in _AUDIT_COUNTS}
    out["contact_disjoint_share"] = out["contact_disjoint"] / max(out["contact"], 1)
    out["containment_disjoint_share"] = out["containment_disjoint"] / max(out["containment"], 1)
    return out


def geometry_audit(table: pa.Table) -> dict:
    """The post-gate guarantees of §4.1, measured on the written corpus: containment and contact
    relations on disjoint boxes, duplicate triples, self-loops."""
    return _audit(_audit_counts(table))


class AnnotationTally:
    """:func:`annotation_statistics` of a corpus read a shard at a time (the annotation job's
    final statistics): every figure is built from counts, so the tally holds counts, never rows,
    and its memory does not grow with the corpus."""

    def __init__(self) -> None:
        self.corpus = CorpusTally()  # counts the predicates too
        self.gates: Counter = Counter()
        self.audit: Counter = Counter()
        self.rules: Counter = Counter()  # rejection rules, image-level ones included

    def add(self, kept: pa.Table, rejected: pa.Table | None = None) -> "AnnotationTally":
        self.corpus.add(kept)
        if kept.num_rows:
            self.gates.update(pc.struct_field(pc.list_flatten(kept.column("relations")), "gate").to_pylist())
        self.audit.update(_audit_counts(kept))
        if rejected is not None and rejected.num_rows:
            self.rules.update(r["rule"] for r in pc.list_flatten(rejected.column("rejected")).to_pylist())
        return self

    def statistics(self, counters: Mapping) -> dict:
        stats = self.corpus.statistics()
        stats["direction_balance"] = direction_balance(self.corpus.predicates.elements())
        stats["geometry_audit"] = _audit(self.audit)
        stats["gate_outcomes"] = dict(self.gates)
        stats["images_rejected"] = {k: v for k, v in sorted(self.rules.items()) if k in IMAGE_RULES}
        rej = {k: v for k, v in sorted(self.rules.items()) if k not in IMAGE_RULES}
        stats["rejections_per_rule"] = rej
        n_kept, n_rej = sum(self.corpus.predicates.values()), sum(rej.values())
        stats["candidates"] = n_kept + n_rej
        stats["rejected_share"] = n_rej / max(n_kept + n_rej, 1)
        stats["unchecked_share_of_kept"] = counters.get("unchecked", 0) / max(n_kept, 1)
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


def annotation_statistics(kept: pa.Table, rejected: pa.Table | None, counters: Mapping) -> dict:
    """Everything the run reports: Table-20 corpus stats, balance, rejections, parsing, scoring."""
    return AnnotationTally().add(kept, rejected).statistics(counters)


def latency_percentiles(hist: Mapping[str, int], qs: tuple[float, ...] = (0.5, 0.9, 0.99)) -> dict[str, float | None]:
    """Nearest-rank percentiles (ms) of a latency histogram (bins of
    :func:`pipelines.vlm_calls.latency_bin`): the geometric middle of the bin holding the
    rank, so within about 2.2% of the exact value. None without calls."""
    bins = sorted((int(k), int(n)) for k, n in hist.items() if n)
    total = sum(n for _, n in bins)
    out: dict[str, float | None] = {}
    for q in qs:
        name = f"p{q * 100:g}"
        if not total:
            out[name] = None
            continue
        rank, seen = max(1, int(np.ceil(q * total))), 0
        for k, n in bins:
            seen += n
            if seen >= rank:
                out[name] = round(2.0 ** ((k + 0.5) / _BINS), 3)
                break
    return out


_BINS = 16  # = pipelines.annotate_stages.LATENCY_BINS_PER_DOUBLING (kept here: relate does not import pipelines)


def pass_usage(counters: Mapping) -> dict:
    """Per VLM pass: calls, tokens as reported (None and a count of answers without a report when
    the backend reports none), latency percentiles of the calls, generate seconds (the stage busy
    in that pass, summed over its actors) and calls per busy second."""
    v = counters.get("vlm", {})
    u = v.get("usage", {})
    out = {}
    for p, calls in sorted(v.get("calls", {}).items()):
        reported = int(u.get("tokens_reported", {}).get(p, 0))
        busy = float(u.get("busy_s", {}).get(p, 0.0))
        d = {"calls": int(calls), "answers_with_tokens": reported,
             "answers_without_tokens": int(u.get("tokens_not_reported", {}).get(p, 0))}
        for name in ("prompt_tokens", "completion_tokens"):
            missing = int(u.get(f"{name}_not_reported", {}).get(p, 0))
            d[name] = int(u[name][p]) if reported > missing and p in u.get(name, {}) else None
            if missing:
                d[f"{name}_not_reported"] = missing
        d["latency_ms"] = latency_percentiles(u.get("latency_hist", {}).get(p, {}))
        d["busy_s"] = round(busy, 4) if p in u.get("busy_s", {}) else None
        d["calls_per_busy_s"] = round(calls / busy, 3) if busy > 0 else None
        out[p] = d
    return out


def vlm_call_stats(counters: Mapping, outstanding: Mapping[str, int] | None = None) -> dict:
    """Calls per pass, attempts, retries, calls that failed after their retries by kind (over every
    run, including those a later run retried successfully), failures still outstanding, and per
    pass tokens, latency percentiles and generate time (:func:`pass_usage`)."""
    v = counters.get("vlm", {})
    calls = dict(sorted(v.get("calls", {}).items()))
    return {"calls": sum(calls.values()), "calls_per_pass": calls, "attempts": int(v.get("attempts", 0)),
            "retries": int(v.get("retries", 0)), "failed_calls": dict(sorted(v.get("failed_calls", {}).items())),
            "outstanding_failures": dict(sorted((outstanding or {}).items())), "per_pass": pass_usage(counters)}


def throughput(vlm: Mapping, images: int, wall_s: float, gpus_held: float, gpu_hour_usd: float | None) -> dict:
    """One run's throughput and cost: images per second of wall time; GPU-seconds = GPUs the VLM
    stage holds x wall time, split over the passes by their share of generate time; a cost when a
    price per GPU-hour is given. Tokens are the per-pass sums the backend reported."""
    gpu_s = gpus_held * wall_s
    per_pass = vlm.get("per_pass", {})
    busy = {p: d.get("busy_s") or 0.0 for p, d in per_pass.items()}
    total_busy = sum(busy.values())
    out = {"images": images, "wall_s": round(wall_s, 3), "images_per_s": round(images / wall_s, 3) if wall_s > 0 else None,
           "gpus_held": gpus_held, "gpu_s": round(gpu_s, 3) if gpus_held else None,
           "gpu_s_per_image": round(gpu_s / images, 4) if gpus_held and images else None,
           "gpu_hour_usd": gpu_hour_usd, "cost_usd": None, "cost_usd_per_1k_images": None, "per_pass": {}}
    if gpus_held and gpu_hour_usd is not None:
        out["cost_usd"] = round(gpu_s / 3600 * gpu_hour_usd, 6)
        out["cost_usd_per_1k_images"] = round(1000 * gpu_s / 3600 * gpu_hour_usd / images, 6) if images else None
    for p, d in per_pass.items():
        share = busy[p] / total_busy if total_busy > 0 else 1.0 / max(len(per_pass), 1)
        out["per_pass"][p] = {"images_per_s": round(d["calls"] / wall_s, 3) if wall_s > 0 else None,
                              "gpu_s_per_image": round(gpu_s * share / d["calls"], 4) if gpus_held and d["calls"] else None}
    return out


def _tokens(n: int | None) -> str:
    if n is None:
        return "not reported"
    return f"{n / 1e6:.2f}M" if n >= 1e6 else (f"{n / 1e3:.1f}k" if n >= 1e4 else str(n))


def format_usage_line(vlm: Mapping) -> str:
    """``semantic: 40 calls, tokens 12.3k in / 2.1k out, p50/p90/p99 210/380/910 ms; grow: ...``"""
    parts = []
    for p, d in vlm.get("per_pass", {}).items():
        lat = d.get("latency_ms") or {}
        ms = "/".join("-" if lat.get(k) is None else f"{lat[k]:.0f}" for k in ("p50", "p90", "p99"))
        tok = (f"tokens {_tokens(d.get('prompt_tokens'))} in / {_tokens(d.get('completion_tokens'))} out"
               if d.get("answers_with_tokens") else "tokens not reported")
        parts.append(f"{p}: {d['calls']} calls, {tok}, p50/p90/p99 {ms} ms")
    return "; ".join(parts)


def format_vlm_line(vlm: Mapping) -> str:
    """``calls 120, retries 9, failed 4 (timeout 3, http_500 1), outstanding 1`` for progress lines."""
    failed = vlm.get("failed_calls", {})
    out = vlm.get("outstanding_failures", {})
    kinds = ", ".join(f"{k} {n}" for k, n in failed.items())
    return (f"calls {vlm.get('calls', 0)}, retries {vlm.get('retries', 0)}, failed {sum(failed.values())}"
            + (f" ({kinds})" if kinds else "") + f", outstanding {sum(out.values())}")


def format_throughput_line(tp: Mapping) -> str:
    """``12.5 images/s, 0.16 GPU-s/image, $0.04 per 1k images (at $3.50/GPU-h)`` (GPU parts only on GPUs)."""
    line = f"{tp['images_per_s']} images/s" if tp.get("images_per_s") is not None else "images/s -"
    if tp.get("gpu_s_per_image") is not None:
        line += f", {tp['gpu_s_per_image']} GPU-s/image"
        if tp.get("cost_usd_per_1k_images") is not None:
            line += f", ${tp['cost_usd_per_1k_images']:.4f} per 1k images (at ${tp['gpu_hour_usd']}/GPU-h; run ${tp['cost_usd']:.4f})"
    else:
        line += ", no GPU held (GPU-s and cost: none)"
    return line


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
        if stats["vlm"].get("per_pass"):
            lines.append("vlm passes: " + format_usage_line(stats["vlm"]))
    if stats.get("throughput"):
        lines.append("this run: " + format_throughput_line(stats["throughput"]))
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
