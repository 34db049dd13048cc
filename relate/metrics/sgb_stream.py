"""The ``sgb`` protocol on a scene-graphs file too large to hold: scored one row group at a time.

An SGB sgdet output keeps up to 80 detections and 6,320 ordered pairs x 51 predicate scores per
image; VG150's 26,446 test images make about 8.5 billion scores (34 GB in float32). Everything
SGB's evaluation computes before its final averages is per image (ranking, IoU links, crediting),
so a file is read a batch of images at a time, each batch yields the best crediting rank of the GT
rows of its own images (:class:`SgbPartial`: only the finite ones), and partials of disjoint images
combine by taking the minimum. What is held across batches is one rank per GT row and per mode,
the set of images with a scored pair and two counters: the size of the ground truth, never of the
output. The totals and per-image rows then come from the same aggregation the whole-file scorer
ends in (relate.metrics.scene_graphs.sgb_dense_result), so they are equal to it, bit for bit.

Batches are independent: :func:`sgb_partial` is the unit a parallel runner (eval_jobs.convert's
Ray tasks) hands to its workers, and :func:`combine_partials` needs no order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from relate.metrics._boxmatch import Detections
from relate.metrics._tables import GroundTruth, Predictions
from relate.metrics.recall import RecallResult
from relate.metrics.scene_graphs import (SceneGraphs, _check_labels, check_sgb_labels, label_columns,
                                         load_scene_graphs, sgb_dense_hits_modes, sgb_dense_result, sgb_rank_modes)
from relate.metrics.sgb import _label_set, credit, credit_index
from relate.schema import SchemaError

__all__ = ["SgbPartial", "MODES", "scene_graph_batches", "sgb_partial", "sgb_partial_of", "scene_graphs_of_arrays",
           "combine_partials", "sgb_stream_results", "evaluate_sgb_stream", "SgbRanked", "sgb_rank_arrays",
           "sgb_partial_of_ranked"]

MODES = (True, False)  # graph-constrained, unconstrained: both from one read of each batch


@dataclass
class SgbPartial:
    """What one batch of images contributes: per mode, the GT rows it credits and at which rank."""

    rows: dict[bool, np.ndarray] = field(default_factory=dict)   # GT row indices credited, per mode
    ranks: dict[bool, np.ndarray] = field(default_factory=dict)  # their best rank, same order
    images: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # GT images with a scored pair
    seen: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))    # GT images the batch holds
    n_unscored: int = 0
    n_pairs: int = 0


def scene_graph_batches(path: str | Path, max_bytes: int = 1 << 28) -> Iterator[pa.Table]:
    """The file's rows, a batch of whole images at a time: one row group, or slices of it of about
    ``max_bytes`` (uncompressed) when a writer made its row groups larger."""
    try:
        pf = pq.ParquetFile(str(path))
    except (OSError, pa.ArrowInvalid) as exc:
        raise SchemaError(f"{path}: cannot read scene-graphs Parquet: {exc}") from None
    for g in range(pf.num_row_groups):
        meta = pf.metadata.row_group(g)
        if meta.total_byte_size <= max_bytes:
            yield pf.read_row_group(g)
            continue
        rows = max(1, int(meta.num_rows * max_bytes // meta.total_byte_size))
        for batch in pf.iter_batches(batch_size=rows, row_groups=[g]):
            yield pa.Table.from_batches([batch])


def sgb_partial(gt: GroundTruth, batch: pa.Table, *, ks: Sequence[int], predicates: Sequence[str] | None,
                iou_threshold: float = 0.5) -> SgbPartial:
    """Score one batch of scene-graphs rows (dense pair scores) in both modes."""
    sg = load_scene_graphs(batch, gt)
    index = gt.index_of()
    seen = np.array([index[i] for i in batch.column("image_id").to_pylist()], dtype=np.int64)
    return sgb_partial_of(gt, sg, seen, ks=ks, predicates=predicates, iou_threshold=iou_threshold)


def _gt_order(gt: GroundTruth, rows: np.ndarray, n_objects: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(box offsets per GT image, the GT-order position of each object) for objects given in file
    order, ``n_objects`` per file row, whose GT images are ``rows``."""
    per_img = np.zeros(gt.n_images, np.int64)
    per_img[rows] = n_objects
    off = np.concatenate([[0], np.cumsum(per_img)]).astype(np.int64)
    row_off = np.concatenate([[0], np.cumsum(n_objects)]).astype(np.int64)
    parent = np.repeat(np.arange(rows.size), n_objects)
    return off, off[rows[parent]] + (np.arange(parent.size) - row_off[parent])


def scene_graphs_of_arrays(gt: GroundTruth, rows: np.ndarray, n_objects: np.ndarray, boxes: np.ndarray,
                           labels: Sequence[str | None], object_scores: np.ndarray, n_pairs: np.ndarray,
                           pairs: np.ndarray, pair_scores: np.ndarray, predicates: Sequence[str],
                           name: str = "scene_graphs") -> SceneGraphs:
    """The SceneGraphs that load_scene_graphs gives for a dense table built from these arrays (one
    file row per entry of ``rows``, the GT image index of each; objects and pairs concatenated in
    row order; ``boxes`` and ``pair_scores`` already in the file's float32), without the table:
    a converter that has just validated and written the chunk scores the arrays it already holds
    (the table's nested score lists are copied each time pyarrow combines them). The arrays are
    not validated here; validate the table that holds them (relate.schema.validate_scene_graphs)."""
    rows, n_objects, n_pairs = (np.asarray(a, np.int64) for a in (rows, n_objects, n_pairs))
    off, dest = _gt_order(gt, rows, n_objects)
    obj_boxes = np.zeros((dest.size, 4))
    obj_labels = np.empty(dest.size, dtype=object)
    obj_scores = np.zeros(dest.size, np.float32)
    obj_boxes[dest] = np.asarray(boxes, np.float32).reshape(-1, 4)
    obj_labels[dest] = np.asarray(list(labels), dtype=object) if dest.size else obj_labels
    obj_scores[dest] = np.asarray(object_scores, np.float32)
    pairs = np.asarray(pairs).reshape(-1, 2)
    z = np.zeros(0, np.int64)
    none = Predictions(z, z, z, z, np.zeros(0), gt.predicates, name, np.zeros(rows.size + 1, np.int64))
    pair_off = np.concatenate([[0], np.cumsum(n_pairs)]).astype(np.int64)
    return SceneGraphs(Detections(off, obj_boxes, obj_labels), obj_scores, pair_off,
                       rows[np.repeat(np.arange(rows.size), n_pairs)], pairs[:, 0].astype(np.int64),
                       pairs[:, 1].astype(np.int64),
                       np.asarray(pair_scores, np.float32).reshape(pairs.shape[0], len(predicates)),
                       np.asarray(list(predicates), dtype=object), none, name)


def sgb_partial_of(gt: GroundTruth, sg: SceneGraphs, seen: np.ndarray, *, ks: Sequence[int],
                   predicates: Sequence[str] | None, iou_threshold: float = 0.5) -> SgbPartial:
    """:func:`sgb_partial` of a batch already loaded (``seen``: the GT images of its rows)."""
    if sg.triplets.n:
        raise ValueError(f"{sg.source}: streaming sgb scores dense pair_scores; this file has {sg.triplets.n} sparse "
                         "triplets (score it whole with evaluate_scene_graphs)")
    _check_labels(sg)
    out = SgbPartial(seen=np.asarray(seen, np.int64), n_pairs=int(sg.scores.shape[0]))
    hits, pair_img, out.n_unscored = sgb_dense_hits_modes(gt, sg, ks, MODES, predicates, iou_threshold)
    for gc in MODES:
        out.rows[gc] = np.flatnonzero(np.isfinite(hits[gc]))
        out.ranks[gc] = hits[gc][out.rows[gc]]
    out.images = np.unique(pair_img)
    return out


@dataclass
class SgbRanked:
    """A batch of images (in file order) ranked under ``sgb`` before any ground truth is read: the
    part of scoring that reads the pair scores, done where the file is read (eval_jobs.convert's
    reading processes), and everything crediting needs (:func:`sgb_partial_of_ranked`)."""

    n_objects: np.ndarray       # (images,) int64
    boxes: np.ndarray           # (objects, 4) float32, xyxy
    labels: np.ndarray          # (objects,) object: predicted category names
    n_pairs: np.ndarray         # (images,) int64
    entries: dict[bool, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]]  # per mode:
    # (image in the batch, subject, object, label index, rank) of each entry ranked within the largest K
    n_unscored: int = 0


def sgb_rank_arrays(n_objects: np.ndarray, boxes: np.ndarray, labels: Sequence[str | None], object_scores: np.ndarray,
                    n_pairs: np.ndarray, pairs: np.ndarray, pair_scores: np.ndarray, columns: Sequence[str], *,
                    label_set: Sequence[str], ks: Sequence[int], name: str = "scene_graphs") -> SgbRanked:
    """Rank a batch of dense outputs (arrays as :func:`scene_graphs_of_arrays` takes them, already
    validated; ``columns`` names the score columns) in both modes against ``label_set``."""
    n_objects, n_pairs = np.asarray(n_objects, np.int64), np.asarray(n_pairs, np.int64)
    labels = np.asarray(list(labels), dtype=object)
    check_sgb_labels(labels, np.concatenate([[0], np.cumsum(n_objects)]), name)
    index = {str(p): i for i, p in enumerate(label_set)}
    lab, scores, n_unscored = label_columns(columns, index, np.asarray(pair_scores, np.float32).reshape(
        len(pairs), len(columns)))
    pairs = np.asarray(pairs, np.int64).reshape(-1, 2)
    image = np.repeat(np.arange(n_pairs.size), n_pairs)
    first = np.concatenate([[0], np.cumsum(n_objects)[:-1]]).astype(np.int64)
    obj_scores = np.asarray(object_scores, np.float32)
    s, o = obj_scores[first[image] + pairs[:, 0]], obj_scores[first[image] + pairs[:, 1]]
    offsets = np.concatenate([[0], np.cumsum(n_pairs)]).astype(np.int64)
    ranked = sgb_rank_modes(offsets, image, s, o, scores, MODES, ks)
    entries = {gc: (image[pr], pairs[pr, 0], pairs[pr, 1], lab[col], rank) for gc, (pr, col, rank) in ranked.items()}
    return SgbRanked(n_objects, np.asarray(boxes, np.float32).reshape(-1, 4), labels, n_pairs, entries, n_unscored)


def sgb_partial_of_ranked(gt: GroundTruth, rows: np.ndarray, ranked: SgbRanked, *, predicates: Sequence[str] | None,
                          iou_threshold: float = 0.5) -> SgbPartial:
    """Credit a ranked batch (:func:`sgb_rank_arrays`) whose images are the GT images ``rows``: the
    partial :func:`sgb_partial_of` gives for the same arrays."""
    rows = np.asarray(rows, np.int64)
    label_set, _, gli = _label_set(gt, predicates)
    off, dest = _gt_order(gt, rows, ranked.n_objects)
    boxes = np.zeros((dest.size, 4))
    boxes[dest] = ranked.boxes
    labels = np.empty(dest.size, dtype=object)
    labels[dest] = ranked.labels
    ix = credit_index(gt, gli, len(label_set), (off, boxes, labels), iou_threshold)
    out = SgbPartial(seen=rows, n_pairs=int(ranked.n_pairs.sum()), n_unscored=ranked.n_unscored)
    for gc, (img, sub, obj, lab, rank) in ranked.entries.items():
        hit = credit(ix, gt.rel_image.size, rows[img], sub, obj, lab, rank)
        out.rows[gc] = np.flatnonzero(np.isfinite(hit))
        out.ranks[gc] = hit[out.rows[gc]]
    scored = ranked.n_pairs > 0 if len(label_set) else np.zeros(rows.size, bool)
    out.images = np.unique(rows[scored])
    return out


def combine_partials(gt: GroundTruth, partials: Iterable[SgbPartial]) -> tuple[dict[bool, np.ndarray], np.ndarray, int]:
    """(per mode the hit rank of every GT row, the GT images with a scored pair, entries outside
    the label set), refusing an image that two batches both hold (its pairs would split)."""
    hit = {gc: np.full(gt.rel_image.size, np.inf) for gc in MODES}
    seen = np.zeros(gt.n_images, bool)
    scored = np.zeros(gt.n_images, bool)
    n_unscored = 0
    for p in partials:
        if seen[p.seen].any():
            twice = gt.image_ids[p.seen[seen[p.seen]]].tolist()
            raise SchemaError(f"image_id(s) {twice[:5]} appear in more than one row of the file; one row per image")
        seen[p.seen] = True
        scored[p.images] = True
        n_unscored += p.n_unscored
        for gc in MODES:
            np.minimum.at(hit[gc], p.rows[gc], p.ranks[gc])
    return hit, np.flatnonzero(scored), n_unscored


def sgb_stream_results(gt: GroundTruth, partials: Iterable[SgbPartial], *, ks: Sequence[int],
                       predicates: Sequence[str] | None, per_image: bool = True) -> dict[str, RecallResult]:
    """{"graph_constrained", "unconstrained"} -> RecallResult from a file's partials (any order)."""
    hit, images, n_unscored = combine_partials(gt, partials)
    return {("graph_constrained" if gc else "unconstrained"):
            sgb_dense_result(gt, hit[gc], images, n_unscored, ks, gc, predicates, per_image) for gc in MODES}


def evaluate_sgb_stream(gt: GroundTruth, path: str | Path, *, ks: Sequence[int] = (20, 50, 100),
                        predicates: Sequence[str] | None = None, iou_threshold: float = 0.5,
                        max_bytes: int = 1 << 28, per_image: bool = True) -> dict[str, RecallResult]:
    """Both modes of a dense scene-graphs file under ``sgb``, one batch of images in memory at a time."""
    parts = (sgb_partial(gt, b, ks=ks, predicates=predicates, iou_threshold=iou_threshold)
             for b in scene_graph_batches(path, max_bytes))
    return sgb_stream_results(gt, parts, ks=ks, predicates=predicates, per_image=per_image)
