"""Scene-Graph-Benchmark's own way of scoring a test output, image by image: the reference the
``sgdet_full_*`` figures are set against (``sgb_own_images_per_s``).

Written for this benchmark from a reading of SGB's ``vg_eval.py`` (``evaluate_relation_of_one_image``),
``sgg_eval.py`` (``SGRecall``, ``SGNoGraphConstraintRecall``, ``SGMeanRecall``, ``_triplet``,
``_compute_pred_matches``) and ``utils/miscellaneous.py`` (``intersect_2d``, ``argsort_desc``,
``bbox_overlaps``); none of its code is used. It keeps SGB's structure and its cost per image:

* per image, the graph-constrained list is every pair with its best non-background predicate, in
  the order the output file holds the pairs (SGB's relation post-processor saves them sorted by
  predicate x subject x object score; the generated shards are not sorted, so that sort is done
  here first, one argsort per image, and charged to this side);
* GT and predicted triplets are compared as a (GT rows x pairs x 3) equality table, and every GT
  row with a label match gets the two IoUs (torch, +1 pixel convention, float32) against the
  matching pairs; a prediction credits every GT row it matches;
* R@K is ``len(reduce(np.union1d, pred_to_gt[:K])) / n_gt``; the unconstrained list is
  ``argsort_desc`` of the whole (pairs x predicates) product matrix, cut at 100;
* mR@K (graph-constrained, as SGB computes it): per predicate, the mean over images of its hits
  over its GT count, summed over the P predicates and divided by P.

Only what the ``sgb`` scorer reports is computed: SGB's zero-shot recall and pair accuracy, which
its evaluation also runs on every image, are left out, so this side is, if anything, faster than
SGB itself. Ground truth is prepared before the clock starts (SGB reads it from its dataset).
"""

from __future__ import annotations

from functools import reduce
from typing import Sequence

import numpy as np

__all__ = ["KS", "sgb_gt_images", "sgb_own_scores"]

KS = (20, 50, 100)


def sgb_gt_images(corpus_rows: Sequence[dict], label_index: dict[str, int],
                  predicate_index: dict[str, int]) -> list[dict]:
    """Per image, what SGB's ``get_groundtruth`` gives: xyxy boxes (float32), 1-based labels and
    ``relation_tuple`` rows (subject, object, 1-based predicate)."""
    out = []
    for r in corpus_rows:
        boxes = np.array([[b["x1"], b["y1"], b["x2"], b["y2"]] for b in r["boxes"]], np.float32).reshape(-1, 4)
        labels = np.array([label_index[b["category"]] for b in r["boxes"]], np.int64)
        rels = np.array([[x["subject"], x["object"], predicate_index[x["predicate"]]] for x in r["relations"]],
                        np.int64).reshape(-1, 3)
        out.append({"image_id": r["image_id"], "boxes": boxes, "labels": labels, "rels": rels})
    return out


def _intersect_2d(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a[..., None] == b.T[None, ...]).all(1)


def _argsort_desc(scores: np.ndarray) -> np.ndarray:
    return np.column_stack(np.unravel_index(np.argsort(-scores.ravel()), scores.shape))


def _iou(one: np.ndarray, many: np.ndarray):
    """IoU of one box against many, as SGB's boxlist_iou computes it (torch float32, +1 pixel)."""
    import torch

    a, b = torch.as_tensor(one[None], dtype=torch.float32), torch.as_tensor(many, dtype=torch.float32)
    area_a = (a[:, 2] - a[:, 0] + 1) * (a[:, 3] - a[:, 1] + 1)
    area_b = (b[:, 2] - b[:, 0] + 1) * (b[:, 3] - b[:, 1] + 1)
    lt = torch.max(a[:, None, :2], b[:, :2])
    rb = torch.min(a[:, None, 2:], b[:, 2:])
    wh = (rb - lt + 1).clamp(min=0)
    inter = wh[:, :, 0] * wh[:, :, 1]
    return (inter / (area_a[:, None] + area_b - inter)).numpy()[0]


def _triplets(rels: np.ndarray, labels: np.ndarray, boxes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    s, o, p = rels[:, 0], rels[:, 1], rels[:, 2]
    return np.column_stack((labels[s], p, labels[o])), np.column_stack((boxes[s], boxes[o]))


def _pred_to_gt(gt_trip, gt_tboxes, pred_trip, pred_tboxes, iou_thres: float) -> list[list[int]]:
    keeps = _intersect_2d(gt_trip, pred_trip)
    has = keeps.any(1)
    pred_to_gt: list[list[int]] = [[] for _ in range(pred_tboxes.shape[0])]
    for g, gbox, keep in zip(np.where(has)[0], gt_tboxes[has], keeps[has]):
        boxes = pred_tboxes[keep]
        ok = (_iou(gbox[:4], boxes[:, :4]) >= iou_thres) & (_iou(gbox[4:], boxes[:, 4:]) >= iou_thres)
        for i in np.where(keep)[0][ok]:
            pred_to_gt[i].append(int(g))
    return pred_to_gt


def _recall(pred_to_gt: list, n_gt: int, k: int) -> tuple[float, np.ndarray]:
    match = reduce(np.union1d, pred_to_gt[:k])
    return float(len(match)) / float(n_gt), np.asarray(match, np.int64)


def sgb_own_scores(gt_images: Sequence[dict], predictions: Sequence, n_predicates: int,
                   iou_thres: float = 0.5) -> dict:
    """R@K / ngR@K per image and mR@K (graph-constrained) over ``predictions`` (objects with SGB's
    BoxList fields: ``bbox``, ``extra_fields`` pred_labels, pred_scores, rel_pair_idxs and
    pred_rel_scores with the background in column 0), aligned with ``gt_images``."""
    per_image: dict[str, dict] = {}
    collect = {k: [[] for _ in range(n_predicates + 1)] for k in KS}
    for gt, pred in zip(gt_images, predictions):
        rels = gt["rels"]
        if len(rels) == 0:
            continue
        f = pred.extra_fields
        pairs = f["rel_pair_idxs"].long().numpy()
        rel_scores = f["pred_rel_scores"].numpy()
        boxes = pred.bbox.numpy()
        labels = f["pred_labels"].long().numpy()
        obj_scores = f["pred_scores"].numpy()
        if pairs.shape[0] == 0:
            continue
        # the order SGB's relation post-processor saves: best predicate x subject x object, descending
        triple = rel_scores[:, 1:].max(1) * obj_scores[pairs[:, 0]] * obj_scores[pairs[:, 1]]
        order = np.argsort(-triple)
        pairs, rel_scores = pairs[order], rel_scores[order]
        gt_trip, gt_tboxes = _triplets(rels, gt["labels"], gt["boxes"])
        # graph-constrained (SGRecall)
        pred_rels = np.column_stack((pairs, 1 + rel_scores[:, 1:].argmax(1)))
        p_trip, p_tboxes = _triplets(pred_rels, labels, boxes)
        to_gt = _pred_to_gt(gt_trip, gt_tboxes, p_trip, p_tboxes, iou_thres)
        row = {}
        for k in KS:
            row[("gc", k)], match = _recall(to_gt, len(rels), k)
            # SGMeanRecall: per predicate of this image, hits over count
            hit, count = np.zeros(n_predicates + 1), np.zeros(n_predicates + 1)
            for p in rels[:, 2]:
                count[p] += 1
            for m in match:
                hit[rels[int(m), 2]] += 1
            for p in range(1, n_predicates + 1):
                if count[p] > 0:
                    collect[k][p].append(hit[p] / count[p])
        # no graph constraint (SGNoGraphConstraintRecall)
        overall = obj_scores[pairs].prod(1)[:, None] * rel_scores[:, 1:]
        top = _argsort_desc(overall)[:100]
        ng_rels = np.column_stack((pairs[top[:, 0]], top[:, 1] + 1))
        n_trip, n_tboxes = _triplets(ng_rels, labels, boxes)
        ng_to_gt = _pred_to_gt(gt_trip, gt_tboxes, n_trip, n_tboxes, iou_thres)
        for k in KS:
            row[("nogc", k)] = _recall(ng_to_gt, len(rels), k)[0]
        per_image[gt["image_id"]] = row
    mean_recall = {k: sum(float(np.mean(v)) if v else 0.0 for v in collect[k][1:]) / n_predicates for k in KS}
    return {"per_image": per_image, "mR_gc": mean_recall}
