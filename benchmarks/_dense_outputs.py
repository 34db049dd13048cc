"""SGB-style dense outputs for the evaluator benchmark: per image ~10 detected objects (jittered GT
boxes, labels right 85% of the time, label scores), 80 ordered pairs, each with all 50 predicate
scores; built straight as Arrow arrays (no Python rows), in the scene-graphs layout and, for the
in-run baseline, in the flat one-row-per-triplet layout plus a detector table."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from relate.schema import (BOX_TYPE, CORPUS_SCHEMA, IMAGE_SCHEMA, OBJECT_TYPE, PAIR_TYPE, PREDICTIONS_SCHEMA,
                           RELATION_TYPE, TRIPLET_TYPE, scene_graphs_schema)

__all__ = ["DenseOutputs", "make_dense", "flat_tables"]

N_OBJ, N_PAIRS, N_REL, VOCAB, N_CAT = 10, 80, 8, 50, 30


def _lists(arrays, type_, counts) -> pa.ListArray:
    if isinstance(type_, pa.StructType):
        arrays = [a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a for a in arrays]
    values = pa.StructArray.from_arrays(arrays, fields=list(type_)) if isinstance(type_, pa.StructType) else arrays
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), values)


class DenseOutputs:
    """Ground truth, the dense scene-graphs table and the arrays both layouts are built from."""

    def __init__(self, n_images: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.n = n_images
        self.vocab = np.array([f"pred_{i:02d}" for i in range(VOCAB)], dtype=object)
        self.cats = np.array([f"cat_{i:02d}" for i in range(N_CAT)], dtype=object)
        self.ids = np.array([f"img{i:06d}" for i in range(n_images)], dtype=object)
        nb = n_images * N_OBJ
        x, y = rng.uniform(0, 500, nb), rng.uniform(0, 350, nb)
        self.gt_xyxy = np.stack([x, y, x + 20 + rng.uniform(0, 100, nb), y + 20 + rng.uniform(0, 100, nb)], 1)
        self.gt_cat = rng.integers(0, N_CAT, nb)
        self.det_xyxy = (self.gt_xyxy + rng.normal(0, 3, (nb, 4))).clip(0)
        self.det_xyxy[:, 2:] = np.maximum(self.det_xyxy[:, 2:], self.det_xyxy[:, :2] + 1)
        self.det_cat = np.where(rng.random(nb) < .85, self.gt_cat, rng.integers(0, N_CAT, nb))
        self.det_score = rng.uniform(.3, 1, nb).astype(np.float32)
        pairs = np.array([(a, b) for a in range(N_OBJ) for b in range(N_OBJ) if a != b])[:N_PAIRS]
        self.pairs = pairs
        p = 1.0 / np.arange(1, VOCAB + 1) ** 1.6
        gt_pair = np.stack([rng.choice(N_PAIRS, N_REL, replace=False) for _ in range(n_images)])
        self.gt_pred = rng.choice(VOCAB, (n_images, N_REL), p=p / p.sum())
        self.gt_s, self.gt_o = pairs[gt_pair, 0], pairs[gt_pair, 1]
        scores = rng.random((n_images, N_PAIRS, VOCAB), dtype=np.float32) ** 3
        boost = rng.random((n_images, N_REL)) < .6
        rows = np.repeat(np.arange(n_images), N_REL)
        scores[rows, gt_pair.ravel(), self.gt_pred.ravel()] += np.where(boost.ravel(), 8.0, 0.0).astype(np.float32)
        self.scores = (scores / scores.sum(-1, keepdims=True)).reshape(-1, VOCAB)  # softmax-like rows

    def corpus(self) -> pa.Table:
        n, nb, nr = self.n, self.n * N_OBJ, self.n * N_REL
        f32 = lambda v: pa.array(v.astype(np.float32))  # noqa: E731
        boxes = [f32(self.gt_xyxy[:, k]) for k in range(4)] + [
            pa.array(self.cats[self.gt_cat].astype(str)), pa.array(np.zeros(nb, bool)), pa.array(np.zeros(nb, bool))]
        rels = [pa.array(self.gt_s.ravel().astype(np.int32)), pa.array(self.gt_o.ravel().astype(np.int32)),
                pa.array(self.vocab[self.gt_pred.ravel()].astype(str)), pa.array(np.full(nr, "human")),
                pa.array(np.full(nr, "kept")), pa.nulls(nr, pa.float32())]
        return pa.Table.from_arrays([
            pa.array(self.ids.astype(str)), pa.array(np.full(n, "mem://x")), pa.array(np.full(n, 640, np.int32)),
            pa.array(np.full(n, 480, np.int32)), pa.array(np.full(n, "bench")), pa.array(np.full(n, "test")),
            _lists(boxes, BOX_TYPE, np.full(n, N_OBJ)), _lists(rels, RELATION_TYPE, np.full(n, N_REL)),
            pa.nulls(n, CORPUS_SCHEMA.field("asked_pairs").type)], schema=CORPUS_SCHEMA)

    def _objects(self) -> pa.ListArray:
        f32 = lambda v: pa.array(v.astype(np.float32))  # noqa: E731
        arrays = [f32(self.det_xyxy[:, k]) for k in range(4)] + [pa.array(self.cats[self.det_cat].astype(str)),
                                                                   pa.array(self.det_score)]
        return _lists(arrays, OBJECT_TYPE, np.full(self.n, N_OBJ))

    def scene_graphs(self) -> pa.Table:
        n, npairs = self.n, self.n * N_PAIRS
        ps = np.tile(self.pairs[:, 0], n).astype(np.int32)
        po = np.tile(self.pairs[:, 1], n).astype(np.int32)
        inner = pa.ListArray.from_arrays(pa.array(np.arange(0, npairs * VOCAB + 1, VOCAB, dtype=np.int32)),
                                         pa.array(self.scores.reshape(-1)))
        empty = pa.ListArray.from_arrays(pa.array(np.zeros(n + 1, np.int32)),
                                         pa.array([], TRIPLET_TYPE), type=pa.list_(TRIPLET_TYPE))
        return pa.Table.from_arrays([pa.array(self.ids.astype(str)), self._objects(),
                                     _lists([pa.array(ps), pa.array(po)], PAIR_TYPE, np.full(n, N_PAIRS)),
                                     _lists(inner, None, np.full(n, N_PAIRS)), empty],
                                    schema=scene_graphs_schema(self.vocab.tolist()))


def flat_tables(d: DenseOutputs, n_images: int) -> tuple[pa.Table, pa.Table, np.ndarray]:
    """The first ``n_images`` of ``d`` as the flat layout: one triplet row per (pair, predicate)
    holding the predicate score, the objects as a detector IMAGE_SCHEMA table, their label scores."""
    n, nt = n_images, n_images * N_PAIRS * VOCAB
    ps = np.repeat(np.tile(d.pairs[:, 0], n), VOCAB).astype(np.int32)
    po = np.repeat(np.tile(d.pairs[:, 1], n), VOCAB).astype(np.int32)
    pred = np.tile(d.vocab.astype(str), n * N_PAIRS)
    tri = [pa.array(ps), pa.array(po), pa.array(pred), pa.array(d.scores[:n * N_PAIRS].reshape(-1)),
           pa.nulls(nt, pa.float32()), pa.nulls(nt, pa.float32())]
    preds = pa.Table.from_arrays([pa.array(d.ids[:n].astype(str)),
                                  _lists(tri, TRIPLET_TYPE, np.full(n, N_PAIRS * VOCAB))], schema=PREDICTIONS_SCHEMA)
    nb = n * N_OBJ
    f32 = lambda v: pa.array(v[:nb].astype(np.float32))  # noqa: E731
    boxes = [f32(d.det_xyxy[:, k]) for k in range(4)] + [
        pa.array(d.cats[d.det_cat[:nb]].astype(str)), pa.array(np.zeros(nb, bool)), pa.array(np.zeros(nb, bool))]
    det = pa.Table.from_arrays([
        pa.array(d.ids[:n].astype(str)), pa.array(np.full(n, "mem://x")), pa.array(np.full(n, 640, np.int32)),
        pa.array(np.full(n, 480, np.int32)), pa.array(np.full(n, "det")), pa.nulls(n, pa.string()),
        _lists(boxes, BOX_TYPE, np.full(n, N_OBJ))], schema=IMAGE_SCHEMA)
    return preds, det, d.det_score[:nb]


def make_dense(n_images: int, seed: int = 0) -> DenseOutputs:
    return DenseOutputs(n_images, seed)
