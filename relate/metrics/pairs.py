"""Pair-recall ceiling: the share of GT relations whose two endpoints a detector recovers (5.3).

Detection-mode recall cannot exceed it, it bounds every relation model on the same boxes alike,
and it moves with the detector's confidence threshold and box cap, so A4 reports it beside every
number and the composite divides A4 by it.
"""

from __future__ import annotations

import numpy as np

from relate.metrics._boxmatch import Detections, box_map
from relate.metrics._tables import GroundTruth

__all__ = ["pair_recall_ceiling", "relations_covered"]


def _detected(gt: GroundTruth, det: Detections, iou_threshold: float, one_to_one: bool,
              require_category: bool) -> tuple[np.ndarray, np.ndarray]:
    """(GT box detected, GT relation with both endpoints detected)."""
    img, _, gbox = box_map(gt, det, iou_threshold=iou_threshold, one_to_one=one_to_one,
                           require_category=require_category)
    detected = np.zeros(gt.boxes.shape[0], bool)
    detected[gt.box_offsets[img] + gbox] = True
    s = gt.box_offsets[gt.rel_image] + gt.rel_subject
    o = gt.box_offsets[gt.rel_image] + gt.rel_object
    return detected, detected[s] & detected[o]


def relations_covered(gt: GroundTruth, det: Detections, *, iou_threshold: float = 0.5, one_to_one: bool = True,
                      require_category: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Per image of ``gt``: (GT relations, those with both endpoints detected); the ceiling is
    their sums' ratio, which is how an image resample moves it (relate.metrics.resample)."""
    _, both = _detected(gt, det, iou_threshold, one_to_one, require_category)
    return (np.bincount(gt.rel_image, minlength=gt.n_images).astype(np.int64),
            np.bincount(gt.rel_image, both, minlength=gt.n_images).astype(np.int64))


def pair_recall_ceiling(gt: GroundTruth, det: Detections, *, iou_threshold: float = 0.5,
                        one_to_one: bool = True, require_category: bool = False) -> dict[str, float]:
    """Ceiling, object recall and boxes per image of one detector operating point.

    Under ``one_to_one`` each detection covers at most one GT box, so two GT objects matched by a
    single detection count once (the same rule the one-to-one recall matcher applies).
    """
    detected, both = _detected(gt, det, iou_threshold, one_to_one, require_category)
    return {
        "ceiling": float(both.mean()) if both.size else float("nan"),
        "object_recall": float(detected.mean()) if detected.size else float("nan"),
        "boxes_per_image": float(det.n_boxes.mean()) if det.n_boxes.size else 0.0,
        "n_relations": float(both.size),
        "iou_threshold": float(iou_threshold),
        "one_to_one": bool(one_to_one),
    }
