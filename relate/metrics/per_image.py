"""Per-image recall rows: what R@K and mR@K average, one image at a time (issue 15).

One row per (image, K) for every image that has GT relations (the images R@K averages under the
``paper`` protocol): ``n_gt`` deduplicated GT triplets, ``hits`` of them credited within the top K,
``recall = hits / n_gt``, and ``predicates``, the image's mR@K terms: one (predicate, hits, n_gt)
per predicate in the image's GT. Aggregation, exactly as :func:`relate.metrics.recall.recall_from_hits`:

* R@K  = mean of ``recall`` over the rows with that K;
* mR@K = per predicate, the mean of hits / n_gt over the rows (images) that hold it, then the
  mean over predicates.

Under ``sgb`` (:func:`sgb_per_image`) the rows follow Scene-Graph-Benchmark's counting instead:
one row per (image, K) for every image R@K averages there (GT relations and at least one scored
pair), ``n_gt`` and ``hits`` counting repeated GT annotations, and the mR@K terms per predicate of
the label set; mR@K divides by the label set's size, not by the predicates seen.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from relate.metrics._tables import GroundTruth

__all__ = ["per_image_recall", "aggregate_per_image", "sgb_per_image"]


def per_image_recall(gt: GroundTruth, hit_rank: np.ndarray, ks: Sequence[int]) -> list[dict]:
    """Rows (image_id, k, n_gt, hits, recall, predicates) from the per-triplet hit ranks of
    :func:`relate.metrics.recall.match_triplets` (``inf`` = never credited)."""
    V = max(gt.predicates.size, 1)
    n_img = np.bincount(gt.rel_image, minlength=gt.n_images)
    imgs = np.flatnonzero(n_img)
    group = gt.rel_image * V + gt.rel_predicate
    ug, ginv = np.unique(group, return_inverse=True)  # sorted: image-major, then predicate
    g_n = np.bincount(ginv, minlength=ug.size)
    g_img, g_pred = ug // V, ug % V
    g_start = np.searchsorted(g_img, imgs)
    g_end = np.searchsorted(g_img, imgs, side="right")
    names = [str(p) for p in gt.predicates.tolist()]
    ids = gt.image_ids.tolist()
    rows = []
    for k in ks:
        h = hit_rank < k
        hits = np.bincount(gt.rel_image, h, minlength=gt.n_images).astype(np.int64)
        g_h = np.bincount(ginv, h, minlength=ug.size).astype(np.int64)
        for i, a, b in zip(imgs.tolist(), g_start.tolist(), g_end.tolist()):
            terms = [{"predicate": names[c], "hits": int(x), "n_gt": int(n)}
                     for c, x, n in zip(g_pred[a:b].tolist(), g_h[a:b].tolist(), g_n[a:b].tolist())]
            rows.append({"image_id": str(ids[i]), "k": int(k), "n_gt": int(n_img[i]), "hits": int(hits[i]),
                         "recall": float(hits[i] / n_img[i]), "predicates": terms})
    return rows


def sgb_per_image(gt: GroundTruth, gli: np.ndarray, hit_rank: np.ndarray, pair_img: np.ndarray,
                  label_set: Sequence[str], ks: Sequence[int]) -> list[dict]:
    """Rows (image_id, k, n_gt, hits, recall, predicates) of the images SGB's R@K averages, from the
    per-GT-row hit ranks of relate.metrics.sgb and each row's label index ``gli``; ``recall`` is the
    very float SGB's R@K averages (repeat-weighted hits over repeat-weighted rows)."""
    P = max(len(label_set), 1)
    rep = gt.rel_repeats if gt.rel_repeats is not None else np.ones(gt.rel_image.size, np.int64)
    n_img = np.bincount(gt.rel_image, rep, minlength=gt.n_images).astype(np.int64)
    imgs = np.flatnonzero((n_img > 0) & (np.bincount(pair_img, minlength=gt.n_images) > 0))
    ug, ginv = np.unique(gt.rel_image * P + gli, return_inverse=True)
    g_n = np.bincount(ginv, rep, minlength=ug.size).astype(np.int64)
    g_img, g_pred = ug // P, ug % P
    g_start, g_end = np.searchsorted(g_img, imgs), np.searchsorted(g_img, imgs, side="right")
    names, ids = [str(p) for p in label_set], gt.image_ids.tolist()
    rows = []
    for k in ks:
        h = (hit_rank < k) * rep
        hits = np.bincount(gt.rel_image, h, minlength=gt.n_images).astype(np.int64)
        g_h = np.bincount(ginv, h, minlength=ug.size).astype(np.int64)
        for i, a, b in zip(imgs.tolist(), g_start.tolist(), g_end.tolist()):
            terms = [{"predicate": names[c], "hits": int(x), "n_gt": int(n)}
                     for c, x, n in zip(g_pred[a:b].tolist(), g_h[a:b].tolist(), g_n[a:b].tolist())]
            rows.append({"image_id": str(ids[i]), "k": int(k), "n_gt": int(n_img[i]), "hits": int(hits[i]),
                         "recall": float(hits[i] / n_img[i]), "predicates": terms})
    return rows


def aggregate_per_image(rows: Sequence[dict], k: int) -> dict[str, float]:
    """R@K and mR@K recomputed from per-image rows (the check that they add up to the report)."""
    sel = [r for r in rows if r["k"] == k]
    by_pred: dict[str, list[float]] = {}
    for r in sel:
        for t in r["predicates"]:
            by_pred.setdefault(t["predicate"], []).append(t["hits"] / t["n_gt"])
    R = float(np.mean([r["recall"] for r in sel])) if sel else float("nan")
    mR = float(np.mean([np.mean(v) for v in by_pred.values()])) if by_pred else float("nan")
    return {f"R@{k}": R, f"mR@{k}": mR}
