"""Flattened views of the ground-truth corpus and of prediction files, shared by every metric.

Every metric works on flat numpy arrays (one entry per relation / triplet / box) rather than on
per-image Python objects, so 10k images with 100 scored pairs each evaluate in seconds. This
module owns the conversion from the Parquet data model (relate.schema) to those arrays and the
validation of prediction files, whose errors name the file, the row and the image.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from relate.schema import PREDICTIONS_SCHEMA, SchemaError, to_table, validate_predictions

__all__ = ["GroundTruth", "Predictions", "load_ground_truth", "load_predictions", "expand_join",
           "group_first", "encode_strings"]


def _list_parts(col: pa.ChunkedArray) -> tuple[pa.StructArray, np.ndarray]:
    arr = col.combine_chunks()
    parent = pc.list_parent_indices(arr).to_numpy().astype(np.int64)
    return arr.flatten(), parent


def _np(arr: pa.Array, dtype=None) -> np.ndarray:
    out = arr.to_numpy(zero_copy_only=False)
    return out.astype(dtype) if dtype is not None else out


def encode_strings(values, vocab: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes for ``values``: strings in ``vocab`` keep its order, new ones are appended.

    Dictionary-encodes in Arrow (hashing, no Python string sort), so millions of triplets cost
    tens of milliseconds; only the few distinct strings go through Python.
    """
    vocab = np.asarray([] if vocab is None else vocab, dtype=object)
    index = {s: i for i, s in enumerate(vocab.tolist())}
    arr = values if isinstance(values, (pa.Array, pa.ChunkedArray)) else pa.array(np.asarray(values, dtype=object), pa.string())
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if len(arr) == 0:
        return np.zeros(0, np.int64), vocab
    enc = pc.dictionary_encode(arr.cast(pa.string()))
    uniq = enc.dictionary.to_pylist()
    extra = [u for u in uniq if u not in index]
    for u in extra:
        index[u] = len(index)
    lut = np.array([index[u] for u in uniq], dtype=np.int64)
    full = np.concatenate([vocab, np.asarray(extra, dtype=object)]) if extra else vocab
    return lut[enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)], full


@dataclass(frozen=True)
class GroundTruth:
    """One evaluated split, flattened. Relations are deduplicated on (image, subject, object,
    predicate): a repeated annotation is one fact and must not be recoverable twice. How often each
    kept row was annotated stays in ``rel_repeats`` for the ``sgb`` protocol, which counts repeats."""

    image_ids: np.ndarray          # (I,) object
    box_offsets: np.ndarray        # (I + 1,) int64, boxes of image i are box_offsets[i]:[i + 1]
    boxes: np.ndarray              # (B, 4) float64 x1 y1 x2 y2 pixels
    categories: np.ndarray         # (B,) object, may hold None
    rel_image: np.ndarray          # (R,) int64 image index
    rel_subject: np.ndarray        # (R,) int64 box index within the image
    rel_object: np.ndarray         # (R,) int64
    rel_predicate: np.ndarray      # (R,) int64 code into ``predicates``
    predicates: np.ndarray         # (V,) object, the split's predicate strings
    rel_repeats: np.ndarray | None = None  # (R,) int64 times each kept row was annotated (sgb counts all)

    @property
    def n_images(self) -> int:
        return int(self.image_ids.size)

    @property
    def n_boxes(self) -> np.ndarray:
        return np.diff(self.box_offsets)

    @property
    def max_boxes(self) -> int:
        return int(self.n_boxes.max(initial=0))

    def index_of(self) -> dict[str, int]:
        return {s: i for i, s in enumerate(self.image_ids.tolist())}

    def support(self) -> np.ndarray:
        """Annotation count per predicate in this split (the LVIS-style bucket statistic)."""
        return np.bincount(self.rel_predicate, minlength=self.predicates.size)


def _boxes(table: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    col = table.column("boxes").combine_chunks()
    offsets = col.offsets.to_numpy().astype(np.int64)
    offsets = offsets - offsets[0]
    flat = col.flatten()
    xyxy = np.stack([_np(flat.field(k), np.float64) for k in ("x1", "y1", "x2", "y2")], axis=1) \
        if len(flat) else np.zeros((0, 4))
    cats = _np(flat.field("category")) if len(flat) else np.zeros(0, dtype=object)
    return offsets, xyxy, np.asarray(cats, dtype=object)


def load_ground_truth(table: pa.Table) -> GroundTruth:
    """Flatten a CORPUS_SCHEMA table (or one with the same columns) for the metrics."""
    for col in ("image_id", "boxes", "relations"):
        if col not in table.column_names:
            raise SchemaError(f"ground truth: missing column {col!r}; have {table.column_names}")
    ids = np.asarray(table.column("image_id").to_pylist(), dtype=object)
    offsets, xyxy, cats = _boxes(table)
    rel, img = _list_parts(table.column("relations"))
    s = _np(rel.field("subject"), np.int64) if len(rel) else np.zeros(0, np.int64)
    o = _np(rel.field("object"), np.int64) if len(rel) else np.zeros(0, np.int64)
    codes, vocab = encode_strings(rel.field("predicate"))
    nb = np.diff(offsets)
    bad = (s < 0) | (o < 0) | (s >= nb[img]) | (o >= nb[img])
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise SchemaError(f"ground truth row {img[k]} (image_id={ids[img[k]]!r}): relation "
                          f"({s[k]}, {o[k]}) indexes beyond its {nb[img[k]]} boxes")
    key = np.stack([img, s, o, codes], axis=1)
    if key.size:
        _, first, inv = np.unique(key, axis=0, return_index=True, return_inverse=True)
        count = np.bincount(inv.ravel(), minlength=first.size)
    else:
        first = count = np.zeros(0, np.int64)
    by_row = np.argsort(first)
    keep = first[by_row]
    return GroundTruth(ids, offsets, xyxy, cats, img[keep], s[keep], o[keep], codes[keep], vocab,
                       count[by_row].astype(np.int64))


@dataclass(frozen=True)
class Predictions:
    """Scored triplets of one system on one split, indexed by the ground truth's image order."""

    image: np.ndarray       # (T,) int64 image index into GroundTruth.image_ids
    subject: np.ndarray     # (T,) int64 box index (GT boxes or the detector's)
    object: np.ndarray      # (T,) int64
    predicate: np.ndarray   # (T,) int64 code: GT vocabulary first, unseen strings after it
    score: np.ndarray       # (T,) float64
    vocab: np.ndarray       # predicate strings for the codes
    source: str = "<table>"
    offsets: np.ndarray | None = None  # (rows + 1,) triplets of file row r are offsets[r]:[r + 1]

    @property
    def n(self) -> int:
        return int(self.image.size)


def load_predictions(source: str | Path | pa.Table, gt: GroundTruth, *,
                     n_boxes: Mapping[str, int] | None = None) -> Predictions:
    """Read and validate a PREDICTIONS_SCHEMA Parquet file (or table) against ``gt``.

    ``n_boxes`` gives each image's box count when predictions index a detector's boxes; by
    default they index the ground-truth boxes. Errors name the file, the row and the image_id.
    """
    name = str(source) if not isinstance(source, pa.Table) else "predictions"
    if isinstance(source, pa.Table):
        table = source
    else:
        try:
            table = pq.read_table(source)
        except (OSError, pa.ArrowInvalid) as exc:
            raise SchemaError(f"{name}: cannot read predictions Parquet: {exc}") from None
    if n_boxes is None:
        n_boxes = dict(zip(gt.image_ids.tolist(), gt.n_boxes.tolist()))
    try:
        validate_predictions(table, n_boxes, name=name)
        table = to_table(table, PREDICTIONS_SCHEMA, table=name)
    except SchemaError as exc:
        msg = str(exc)
        raise SchemaError(msg if msg.startswith(name) else f"{name}: {msg}") from None
    ids = table.column("image_id").to_pylist()
    dup = len(set(ids)) != len(ids)
    if dup:
        raise SchemaError(f"{name}: an image_id appears in more than one row; one row per image")
    index = gt.index_of()
    row_img = np.array([index[i] for i in ids], dtype=np.int64)
    tri, parent = _list_parts(table.column("triplets"))
    if len(tri) == 0:
        z = np.zeros(0, np.int64)
        return Predictions(z, z, z, z, np.zeros(0), gt.predicates, name, np.zeros(len(ids) + 1, np.int64))
    codes, vocab = encode_strings(tri.field("predicate"), gt.predicates)
    offsets = np.concatenate([[0], np.cumsum(np.bincount(parent, minlength=len(ids)))]).astype(np.int64)
    return Predictions(row_img[parent], _np(tri.field("subject"), np.int64), _np(tri.field("object"), np.int64),
                       codes, _np(tri.field("score"), np.float64), vocab, name, offsets)


def expand_join(left: np.ndarray, right_sorted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All (i, j) with ``left[i] == right_sorted[j]`` (many-to-many), ``right_sorted`` ascending."""
    lo = np.searchsorted(right_sorted, left, side="left")
    hi = np.searchsorted(right_sorted, left, side="right")
    cnt = hi - lo
    li = np.repeat(np.arange(left.size, dtype=np.int64), cnt)
    start = np.repeat(lo - np.cumsum(cnt) + cnt, cnt)
    rj = start + np.arange(li.size, dtype=np.int64)
    return li, rj


def group_first(keys: np.ndarray) -> np.ndarray:
    """Indices of the first occurrence of each key, in order of appearance."""
    if keys.size == 0:
        return np.zeros(0, np.int64)
    _, first = np.unique(keys, return_index=True)
    return np.sort(first)
