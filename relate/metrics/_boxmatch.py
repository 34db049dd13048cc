"""Detector boxes against ground-truth boxes: the map a detection-mode matcher joins through.

The map lists (image, detector box, GT box) links. The legacy matcher links every pair with
IoU >= 0.5, so a GT object covered by d detections offers d chances to recover one relation
(seed 001, 5.3, "duplicate credit"). The one-to-one map keeps at most one link per GT box and per
detection, chosen greedily by descending IoU (the COCO rule; the most generous correction of 5.3).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from relate.geometry import iou
from relate.metrics._tables import GroundTruth, _boxes
from relate.schema import SchemaError

__all__ = ["Detections", "load_detections", "box_map", "identity_map", "greedy_one_to_one"]


@dataclass(frozen=True)
class Detections:
    """A shared detector's boxes for the ground truth's images, in the ground truth's order."""

    box_offsets: np.ndarray
    boxes: np.ndarray
    categories: np.ndarray

    @property
    def n_boxes(self) -> np.ndarray:
        return np.diff(self.box_offsets)


def load_detections(table: pa.Table, gt: GroundTruth, *, name: str = "detections") -> Detections:
    """Align an IMAGE_SCHEMA-like table (image_id, boxes) to ``gt``; missing images have no boxes."""
    for col in ("image_id", "boxes"):
        if col not in table.column_names:
            raise SchemaError(f"{name}: missing column {col!r}")
    offsets, xyxy, cats = _boxes(table)
    index = gt.index_of()
    ids = table.column("image_id").to_pylist()
    unknown = [i for i in ids if i not in index]
    if unknown:
        raise SchemaError(f"{name}: image_id(s) not in the ground truth: {unknown[:5]}")
    counts = np.zeros(gt.n_images, np.int64)
    rows = np.array([index[i] for i in ids], dtype=np.int64)
    counts[rows] = np.diff(offsets)
    new_off = np.concatenate([[0], np.cumsum(counts)])
    order = np.argsort(rows, kind="stable")
    src = np.concatenate([np.arange(offsets[r], offsets[r + 1]) for r in order]) if len(ids) else np.zeros(0, np.int64)
    src = src.astype(np.int64)
    return Detections(new_off, xyxy[src], cats[src])


def identity_map(gt: GroundTruth) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Ground-truth-box mode: predictions index the GT boxes, so box i links to box i."""
    nb = gt.n_boxes
    img = np.repeat(np.arange(gt.n_images, dtype=np.int64), nb)
    local = np.arange(img.size, dtype=np.int64) - gt.box_offsets[img]
    return img, local, local


def _per_group_best(group: np.ndarray, value: np.ndarray, tie: np.ndarray) -> np.ndarray:
    """Row index of the max ``value`` per group (ties: smallest ``tie``)."""
    order = np.lexsort((tie, -value, group))
    g = group[order]
    first = np.ones(g.size, bool)
    first[1:] = g[1:] != g[:-1]
    return order[first]


def greedy_one_to_one(a: np.ndarray, b: np.ndarray, value: np.ndarray) -> np.ndarray:
    """Boolean mask of links kept by a greedy one-to-one assignment by descending ``value``.

    Vectorised as rounds of mutual best choices: a link that is the best of both its ends is
    exactly the one sequential greedy would take first among the links touching those ends.
    """
    keep = np.zeros(a.size, bool)
    alive = np.arange(a.size)
    while alive.size:
        best_a = _per_group_best(a[alive], value[alive], b[alive])
        best_b = _per_group_best(b[alive], value[alive], a[alive])
        mutual = np.intersect1d(alive[best_a], alive[best_b], assume_unique=True)
        keep[mutual] = True
        used_a = np.zeros(int(a.max()) + 1, bool)
        used_b = np.zeros(int(b.max()) + 1, bool)
        used_a[a[mutual]] = True
        used_b[b[mutual]] = True
        alive = alive[~(used_a[a[alive]] | used_b[b[alive]])]
    return keep


def box_map(gt: GroundTruth, det: Detections, *, iou_threshold: float = 0.5, one_to_one: bool = True,
            require_category: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(image, detector box, GT box) links sorted by (image, detector box)."""
    ng, nd = gt.n_boxes, det.n_boxes
    cnt = ng * nd
    img = np.repeat(np.arange(gt.n_images, dtype=np.int64), cnt)
    t = np.arange(img.size, dtype=np.int64) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    gi = t // np.maximum(nd[img], 1)
    di = t % np.maximum(nd[img], 1)
    gb = gt.box_offsets[img] + gi
    db = det.box_offsets[img] + di
    ov = iou(gt.boxes[gb], det.boxes[db]) if img.size else np.zeros(0)
    ok = ov >= iou_threshold
    if require_category:
        gc = np.char.lower(gt.categories[gb].astype(str))
        dc = np.char.lower(det.categories[db].astype(str))
        ok &= (gc == dc) & (gt.categories[gb] != None) & (det.categories[db] != None)  # noqa: E711
    img, gi, di, ov, gb, db = img[ok], gi[ok], di[ok], ov[ok], gb[ok], db[ok]
    if one_to_one and img.size:
        keep = greedy_one_to_one(gb, db, ov)
        img, gi, di = img[keep], gi[keep], di[keep]
    order = np.lexsort((gi, di, img))
    return img[order], di[order], gi[order]
