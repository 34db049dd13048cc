"""Predictions that carry their own objects (relate.schema SCENE_GRAPHS_SCHEMA), scored from one file.

A scene-graphs file holds, per image, the system's objects (box, label, label score), the ordered
pairs it scored with one dense row of predicate scores each (SGB- and OpenPSG-style outputs), and/or
sparse scored triplets over the same objects (a VLM's or a submission's ranked list). predcls,
sgcls and sgdet are one code path: the objects are GT boxes with GT labels, GT boxes with
predicted labels, or a detector's boxes, and link to the GT by IoU and label. Labels count whenever
the file predicts them: an sgcls output scored without them would be scored almost as predcls.
A file whose objects carry no label (a label-free system) links by IoU alone, and ``paper`` can be
asked for that on any file (``require_category=False``); the result names which
(``RecallResult.object_labels``: ``scored`` or ``agnostic``). ``sgb`` always links by label.

The dense score matrix is never expanded to one row per (pair, predicate): the ``sgb`` ranking
works on it directly (relate.metrics.sgb.sgb_rank_dense), so 10k images x 80 pairs x 50 predicates
(40M scores) cost a few seconds, not the minutes a flat triplet table of 40M rows would.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from relate.metrics._boxmatch import Detections
from relate.metrics._tables import GroundTruth, Predictions, _np, encode_strings
from relate.metrics.per_image import sgb_per_image
from relate.metrics.recall import RecallResult, evaluate_recall
from relate.metrics.sgb import (PROTOCOLS, _kth_largest_per_block, _label_set, credit, credit_index, sgb_aggregate,
                                sgb_rank_dense)
from relate.schema import (SCENE_GRAPHS_SCHEMA, SchemaError, one_array, scene_graph_predicates, scene_graphs_schema,
                           to_table, validate_scene_graphs)

__all__ = ["SceneGraphs", "load_scene_graphs", "evaluate_scene_graphs", "labels_scored", "sgb_dense_hits",
           "sgb_dense_hits_modes", "sgb_dense_result", "sgb_rank_modes", "label_columns",
           "check_sgb_labels"]


@dataclass(frozen=True)
class SceneGraphs:
    """One system's objects and scored pairs on one split, indexed by the ground truth's images."""

    objects: Detections         # per GT image, GT order; ``categories`` are the predicted labels
    object_scores: np.ndarray   # (O,) float32 label score of each object, aligned with objects.boxes
    pair_offsets: np.ndarray    # (rows + 1,) pairs of file row r are pair_offsets[r]:[r + 1]
    pair_image: np.ndarray      # (N,) int64 GT image index of each pair
    pair_subject: np.ndarray    # (N,) int64 object index within its image
    pair_object: np.ndarray     # (N,) int64
    scores: np.ndarray          # (N, P) float32, dense, columns named by ``predicates``
    predicates: np.ndarray      # (P,) object
    triplets: Predictions       # sparse triplets over the objects (n == 0 when the file has none)
    source: str = "<table>"

    def object_index(self, local: np.ndarray, image: np.ndarray) -> np.ndarray:
        """Row into ``objects.boxes`` of object ``local`` of GT image ``image``."""
        return self.objects.box_offsets[image] + local


def _read(source: str | Path | pa.Table) -> tuple[pa.Table, str]:
    if isinstance(source, pa.Table):
        return source, "scene_graphs"
    try:
        return pq.read_table(source), str(source)
    except (OSError, pa.ArrowInvalid) as exc:
        raise SchemaError(f"{source}: cannot read scene-graphs Parquet: {exc}") from None


def load_scene_graphs(source: str | Path | pa.Table, gt: GroundTruth) -> SceneGraphs:
    """Read and validate a SCENE_GRAPHS_SCHEMA file (or table) against ``gt``'s images."""
    table, name = _read(source)
    names = scene_graph_predicates(table.schema, name=name)
    # the project's types (float32 scores, int32 indices) whatever the writer used; a no-op when they match
    table = to_table(table, SCENE_GRAPHS_SCHEMA if names is None else scene_graphs_schema(names), table=name)
    n_obj = validate_scene_graphs(table, name=name)
    ids = table.column("image_id").to_pylist()
    index = gt.index_of()
    unknown = [i for i in ids if i not in index]
    if unknown:
        raise SchemaError(f"{name}: image_id(s) not in the ground truth: {unknown[:5]} ({len(unknown)} in all)")
    row_img = np.array([index[i] for i in ids], dtype=np.int64)
    # objects move to the GT's image order (small); the score matrix stays where it is
    objs = one_array(table.column("objects"))
    flat = objs.flatten()
    parent = pc.list_parent_indices(objs).to_numpy().astype(np.int64)
    per_img = np.zeros(gt.n_images, np.int64)
    per_img[row_img] = n_obj
    off = np.concatenate([[0], np.cumsum(per_img)]).astype(np.int64)
    row_off = np.concatenate([[0], np.cumsum(n_obj)]).astype(np.int64)
    dest = off[row_img[parent]] + (np.arange(parent.size) - row_off[parent])
    boxes = np.zeros((parent.size, 4))
    labels = np.empty(parent.size, dtype=object)
    scores = np.zeros(parent.size, np.float32)
    if parent.size:
        boxes[dest] = np.stack([_np(flat.field(k), np.float64) for k in ("x1", "y1", "x2", "y2")], axis=1)
        labels[dest] = _np(flat.field("label"))
        scores[dest] = _np(flat.field("score"), np.float32)
    pairs = one_array(table.column("pairs"))
    pflat = pairs.flatten()
    pparent = pc.list_parent_indices(pairs).to_numpy().astype(np.int64)
    poff = np.concatenate([[0], np.cumsum(np.bincount(pparent, minlength=len(ids)))]).astype(np.int64)
    names = np.asarray(names or [], dtype=object)
    values = one_array(table.column("pair_scores")).flatten().flatten()
    matrix = values.to_numpy().reshape(pparent.size, names.size) if pparent.size else np.zeros((0, names.size), np.float32)
    return SceneGraphs(Detections(off, boxes, labels), scores, poff, row_img[pparent],
                       _np(pflat.field("subject"), np.int64), _np(pflat.field("object"), np.int64),
                       matrix, names, _triplets(table, row_img, gt, name), name)


def _triplets(table: pa.Table, row_img: np.ndarray, gt: GroundTruth, name: str) -> Predictions:
    col = one_array(table.column("triplets"))
    tri = col.flatten()
    parent = pc.list_parent_indices(col).to_numpy().astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(np.bincount(parent, minlength=table.num_rows))]).astype(np.int64)
    if len(tri) == 0:
        z = np.zeros(0, np.int64)
        return Predictions(z, z, z, z, np.zeros(0), gt.predicates, name, offsets)
    codes, vocab = encode_strings(tri.field("predicate"), gt.predicates)
    return Predictions(row_img[parent], _np(tri.field("subject"), np.int64), _np(tri.field("object"), np.int64),
                       codes, _np(tri.field("score"), np.float64), vocab, name, offsets)


def _pair_scores(sg: SceneGraphs) -> tuple[np.ndarray, np.ndarray]:
    """Label score of each pair's subject and object (float32)."""
    s = sg.object_scores[sg.object_index(sg.pair_subject, sg.pair_image)]
    o = sg.object_scores[sg.object_index(sg.pair_object, sg.pair_image)]
    return s, o


def dense_to_predictions(sg: SceneGraphs, gt: GroundTruth, *, graph_constrained: bool, max_k: int) -> Predictions:
    """The sparse triplets the ``paper`` ranking would keep: each pair's best predicate (graph-
    constrained) or each image's ``max_k`` best entries with their ties (unconstrained); a triplet
    scores predicate x subject x object label scores."""
    s, o = _pair_scores(sg)
    N, P = sg.scores.shape
    if graph_constrained:
        col = sg.scores.argmax(axis=1) if P else np.zeros(N, np.int64)
        pr = np.arange(N)
        score = (sg.scores[pr, col] * s) * o
    else:
        overall = (s * o)[:, None] * sg.scores
        thr = _kth_largest_per_block(overall, sg.pair_offsets, max_k)
        rows = np.repeat(np.arange(sg.pair_offsets.size - 1), np.diff(sg.pair_offsets))
        pr, col = np.nonzero(overall >= thr[rows][:, None])  # row-major: file order survives
        score = overall[pr, col]
    codes, vocab = encode_strings(sg.predicates[col] if col.size else np.zeros(0, object), gt.predicates)
    return Predictions(sg.pair_image[pr], sg.pair_subject[pr], sg.pair_object[pr], codes,
                       score.astype(np.float64), vocab, sg.source)


def _check_labels(sg: SceneGraphs) -> None:
    check_sgb_labels(sg.objects.categories, sg.objects.box_offsets, sg.source)


def check_sgb_labels(categories: np.ndarray, box_offsets: np.ndarray, source: str) -> None:
    """Refuse objects without a label under ``sgb`` (``box_offsets``: each image's first object)."""
    none = np.flatnonzero(np.equal(categories, None))
    if none.size:
        img = int(np.searchsorted(box_offsets, none[0], side="right") - 1)
        raise ValueError(f"{source}: protocol 'sgb' links boxes by label, but {none.size} object(s) have a null "
                         f"label (first in image index {img}); convert with labels or use protocol 'paper'")


def labels_scored(sg: SceneGraphs, require_category: bool | None = None) -> bool:
    """Whether ``sg``'s objects must carry their GT box's label to link to it (``paper`` protocol).

    ``None`` follows the file: labels are scored when its objects carry them and ignored when none
    does (a label-free system); a file that labels some objects and not others must say which it
    wants. ``True`` on a file without a single label is refused: nothing could ever link."""
    n = int(sg.objects.categories.size)
    unlabelled = int(np.equal(sg.objects.categories, None).sum())
    if require_category is None:
        if 0 < unlabelled < n:
            raise ValueError(f"{sg.source}: {n - unlabelled} object(s) carry a label and {unlabelled} do not; pass "
                             "require_category=True (labels scored; the unlabelled objects link to nothing) or False "
                             "(label-agnostic: IoU alone)")
        return unlabelled == 0
    if require_category and n and unlabelled == n:
        raise ValueError(f"{sg.source}: no object carries a label, so none could link with require_category=True; "
                         "a label-free system is scored label-agnostic (require_category=False or None)")
    return bool(require_category)


def evaluate_scene_graphs(gt: GroundTruth, sg: SceneGraphs, *, ks: Sequence[int] = (20, 50, 100),
                          graph_constrained: bool = True, protocol: str = "paper",
                          predicates: Sequence[str] | None = None, iou_threshold: float = 0.5,
                          matcher: str | None = None, require_category: bool | None = None,
                          per_image: bool = False) -> RecallResult:
    """Recall of a scene-graphs file: its objects link to the GT boxes by IoU and label (``sgb``:
    always, with triplet score = predicate x subject x object label scores, relate.metrics.sgb);
    ``paper`` scores the same triplets with the one-to-one matcher by default, and takes labels into
    account as :func:`labels_scored` decides from ``require_category`` (default: whenever the file
    predicts them). A file scores either its dense pairs or its sparse triplets; both in one file is
    refused."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; valid: {list(PROTOCOLS)}")
    if protocol == "sgb" and require_category is False:
        raise ValueError("protocol 'sgb' links boxes by label, as Scene-Graph-Benchmark does; label-agnostic "
                         "scoring (require_category=False) is a 'paper' option")
    dense = sg.scores.shape[0] > 0
    if dense and sg.triplets.n:
        raise ValueError(f"{sg.source}: has both dense pair_scores ({sg.scores.shape[0]} pairs) and sparse "
                         f"triplets ({sg.triplets.n}); score them from two files")
    ks = tuple(sorted(int(k) for k in ks))
    if protocol == "paper":
        preds = (dense_to_predictions(sg, gt, graph_constrained=graph_constrained, max_k=ks[-1]) if dense
                 else sg.triplets)
        r = evaluate_recall(gt, preds, ks=ks, graph_constrained=graph_constrained, matcher=matcher,
                            detections=sg.objects, iou_threshold=iou_threshold,
                            require_category=labels_scored(sg, require_category), per_image=per_image)
    else:
        _check_labels(sg)
        if not dense:
            r = evaluate_recall(gt, sg.triplets, ks=ks, graph_constrained=graph_constrained, matcher=matcher,
                                detections=sg.objects, iou_threshold=iou_threshold, protocol="sgb",
                                predicates=predicates, object_scores=sg.object_scores)
        else:
            hit, pair_img, n_unscored = sgb_dense_hits(gt, sg, ks, graph_constrained, predicates, iou_threshold)
            r = sgb_dense_result(gt, hit, pair_img, n_unscored, ks, graph_constrained, predicates, per_image)
        r.object_labels = "scored"
    r.box_source = "objects"
    if r.per_image is not None:
        r.per_image = [{**row, "box_source": "objects"} for row in r.per_image]
    return r


def sgb_dense_hits(gt: GroundTruth, sg: SceneGraphs, ks: Sequence[int], graph_constrained: bool,
                   predicates: Sequence[str] | None, iou_threshold: float = 0.5,
                   block_pairs: int = 1 << 20) -> tuple[np.ndarray, np.ndarray, int]:
    """(best rank crediting each GT row, inf if none; GT image of each scored pair; entries outside
    the label set) of ``sg``'s dense pairs under ``sgb``, in one mode (:func:`sgb_dense_hits_modes`)."""
    hits, pair_img, n_unscored = sgb_dense_hits_modes(gt, sg, ks, (graph_constrained,), predicates, iou_threshold,
                                                      block_pairs)
    return hits[graph_constrained], pair_img, n_unscored


def sgb_dense_hits_modes(gt: GroundTruth, sg: SceneGraphs, ks: Sequence[int], modes: Sequence[bool],
                         predicates: Sequence[str] | None, iou_threshold: float = 0.5,
                         block_pairs: int = 1 << 20) -> tuple[dict[bool, np.ndarray], np.ndarray, int]:
    """Per mode in ``modes`` (True: graph-constrained) the best rank crediting each GT row (inf if
    none); the GT image of each scored pair; the entries outside the label set. Every number is
    per image, so files holding disjoint images give hit ranks that combine by ``np.fmin``
    (relate.metrics.sgb_stream). The modes share one ranking pass (:func:`sgb_rank_modes`) and one
    IoU linking of the detections."""
    label_set, index, gli = _label_set(gt, predicates)
    lab, scores, n_unscored = label_columns(sg.predicates, index, sg.scores)
    s, o = _pair_scores(sg)
    ranked = sgb_rank_modes(sg.pair_offsets, sg.pair_image, s, o, scores, modes, ks, block_pairs)
    ix = credit_index(gt, gli, len(label_set), (sg.objects.box_offsets, sg.objects.boxes, sg.objects.categories),
                      iou_threshold)
    hits = {gc: credit(ix, gt.rel_image.size, sg.pair_image[pr], sg.pair_subject[pr], sg.pair_object[pr], lab[col],
                       rank) for gc, (pr, col, rank) in ranked.items()}
    pair_img = sg.pair_image if lab.size else np.zeros(0, np.int64)
    return hits, pair_img, n_unscored


def label_columns(names: Sequence[str], index: dict[str, int], scores: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """(label-set index of each kept column, in label order; the score matrix restricted to them, in
    that order (the matrix itself when it already is); the entries of the columns outside the set).
    Columns in label order make an argmax tie go to the lowest label, as SGB's does."""
    lab = np.array([index.get(str(p), -1) for p in list(names)], dtype=np.int64)
    keep = np.flatnonzero(lab >= 0)
    keep = keep[np.argsort(lab[keep], kind="stable")]
    kept = scores if np.array_equal(keep, np.arange(lab.size)) else np.ascontiguousarray(scores[:, keep])
    return lab[keep], kept, int(scores.shape[0] * (lab.size - keep.size))


def sgb_rank_modes(pair_offsets: np.ndarray, pair_image: np.ndarray, subject_score: np.ndarray,
                   object_score: np.ndarray, scores: np.ndarray, modes: Sequence[bool], ks: Sequence[int],
                   block_pairs: int = 1 << 20) -> dict[bool, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per mode, (pair row, column of ``scores``, rank in its image) of every entry SGB ranks within
    the largest K: :func:`relate.metrics.sgb.sgb_rank_dense` over image blocks of about
    ``block_pairs`` pairs (so the unconstrained product matrix never covers a whole sgdet output),
    with one row maximum per block shared by the modes. Reads no ground truth."""
    max_k = max(int(k) for k in ks)
    out: dict[bool, list] = {gc: [] for gc in modes}
    off, lo = pair_offsets, 0
    while lo < off.size - 1:
        hi = min(max(lo + 1, int(np.searchsorted(off, off[lo] + block_pairs, side="right")) - 1), off.size - 1)
        a, b = int(off[lo]), int(off[hi])
        block = scores[a:b]
        row_max = block.max(axis=1) if block.shape[1] else np.zeros(b - a, np.float32)
        for gc in modes:
            pr, col, rank = sgb_rank_dense(off[lo:hi + 1] - a, pair_image[a:b], subject_score[a:b],
                                           object_score[a:b], block, graph_constrained=gc, max_k=max_k,
                                           row_max=row_max)
            out[gc].append((pr + a, col, rank))
        lo = hi
    z = np.zeros(0, np.int64)
    return {gc: tuple(np.concatenate([p[i] for p in parts]) if parts else z for i in range(3))
            for gc, parts in out.items()}


def sgb_dense_result(gt: GroundTruth, hit: np.ndarray, pair_img: np.ndarray, n_unscored: int, ks: Sequence[int],
                     graph_constrained: bool, predicates: Sequence[str] | None, per_image: bool) -> RecallResult:
    """The ``sgb`` RecallResult from :func:`sgb_dense_hits`'s three parts (with per-image rows when
    asked for): the one aggregation both the whole-file and the streaming scorer end in."""
    ks = tuple(sorted(int(k) for k in ks))
    label_set, _, gli = _label_set(gt, predicates)
    metrics, per_pred, sup, n_cls = sgb_aggregate(gt, gli, hit, pair_img, label_set, ks, n_unscored=n_unscored)
    metrics["n_images"] = float(gt.n_images)
    metrics["n_relations"] = float(gt.rel_repeats.sum() if gt.rel_repeats is not None else gt.rel_image.size)
    mode = "graph_constrained" if graph_constrained else "unconstrained"
    rows = sgb_per_image(gt, gli, hit, pair_img, label_set, ks) if per_image else None
    return RecallResult(mode, "legacy", "objects", ks, metrics, per_pred, sup, n_cls, protocol="sgb", per_image=rows)
