"""The straightforward evaluator the vectorised one is measured against: one Python loop per
image, dicts and sets, exactly the textbook definition of graph-constrained R@K / mR@K / F1@K /
wR@K / buckets with GT boxes. Kept deliberately simple; benchmarks.evaluator asserts that both
produce the same numbers."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Sequence


def loop_recall(gt_images: Sequence[dict], pred_by_image: dict[str, list[dict]], ks: Sequence[int]) -> dict[str, float]:
    """``gt_images``: corpus rows (image_id, relations); ``pred_by_image``: image_id -> triplets."""
    support: dict[str, int] = defaultdict(int)
    per_image = []
    for img in gt_images:
        gt = sorted({(r["subject"], r["object"], r["predicate"]) for r in img["relations"]})
        for _, _, p in gt:
            support[p] += 1
        triplets = sorted(enumerate(pred_by_image.get(img["image_id"], [])), key=lambda t: (-t[1]["score"], t[0]))
        seen, ranked = set(), []
        for _, t in triplets:  # graph constraint: a pair keeps its best predicate only
            pair = (t["subject"], t["object"])
            if pair not in seen:
                seen.add(pair)
                ranked.append((t["subject"], t["object"], t["predicate"]))
        per_image.append((gt, ranked))
    total = sum(support.values())
    out: dict[str, float] = {}
    for k in ks:
        recalls, pred_hits = [], defaultdict(list)
        for gt, ranked in per_image:
            if not gt:
                continue
            top = set(ranked[:k])
            hits = [g in top for g in gt]
            recalls.append(sum(hits) / len(gt))
            by_pred = defaultdict(list)
            for g, h in zip(gt, hits):
                by_pred[g[2]].append(h)
            for p, hs in by_pred.items():
                pred_hits[p].append(sum(hs) / len(hs))
        r_c = {p: sum(v) / len(v) for p, v in pred_hits.items()}
        R = sum(recalls) / len(recalls)
        mR = sum(r_c.values()) / len(r_c)
        w = {p: math.log(total / support[p]) for p in r_c}
        if sum(w.values()) <= 0:
            w = {p: 1.0 for p in r_c}
        out[f"R@{k}"], out[f"mR@{k}"] = R, mR
        out[f"F1@{k}"] = 2 * R * mR / (R + mR) if R + mR > 0 else 0.0
        out[f"wR@{k}"] = sum(w[p] * r_c[p] for p in r_c) / sum(w.values())
        for name, lo, hi in (("rare", 0, 49), ("common", 50, 500), ("frequent", 501, float("inf"))):
            sel = [r_c[p] for p in r_c if lo <= support[p] <= hi]
            out[f"{name}@{k}"] = sum(sel) / len(sel) if sel else float("nan")
    return out
