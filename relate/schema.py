"""The project's Parquet data model: one module owns every table layout and its validation.

Tables (all per image, one row per image, lists inside):

* ``images``      image record + ``boxes`` (+ ``split``).
* ``corpus``      ``images`` columns + ``relations`` (kept relations, annotator's own strings) +
                  ``asked_pairs`` (the box pairs a VLM pass was asked every relation of, so that
                  what it left unstated on them is known not to hold; null when no pass asked).
* ``rejections``  ``image_id`` + ``rejected`` (relation, the gate rule that fired, the pass).
* ``predictions`` ``image_id`` + ``triplets`` (scored subject/object/predicate with channel scores).
* ``scene_graphs`` predictions that carry their own objects: ``objects`` (box, label, label score),
                  ``pairs`` into them with DENSE ``pair_scores`` (one float per predicate of the list
                  in the schema metadata), and optional sparse ``triplets``.
* ``per_image``   evaluation output, one row per (system, benchmark, image, K): the image's recall
                  hits and its mR terms (relate.metrics.per_image), tagged with the protocol.

Validation is vectorised over the flattened list columns and reports the first bad values by
table, row, field and ``image_id`` so that a broken shard can be found without a debugger.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "BOX_TYPE", "RELATION_TYPE", "REJECTION_TYPE", "TRIPLET_TYPE",
    "PREDICATE_HITS_TYPE", "IMAGE_SCHEMA", "CORPUS_SCHEMA", "REJECTIONS_SCHEMA", "PREDICTIONS_SCHEMA",
    "PER_IMAGE_SCHEMA", "OBJECT_TYPE", "PAIR_TYPE", "SCENE_GRAPHS_SCHEMA", "PREDICATES_KEY", "SCENE_GRAPHS_ROW_GROUP",
    "PASSES", "GATE_OUTCOMES", "SchemaError",
    "validate_images", "validate_corpus", "validate_rejections", "validate_predictions",
    "validate_scene_graphs", "scene_graphs_schema", "scene_graph_predicates", "to_table", "one_array",
]

PASSES = ("semantic", "grow", "spatial", "pairs", "topup", "human")
GATE_OUTCOMES = ("kept", "swapped", "restated")

BOX_TYPE = pa.struct([
    ("x1", pa.float32()), ("y1", pa.float32()), ("x2", pa.float32()), ("y2", pa.float32()),
    ("category", pa.string()), ("is_person", pa.bool_()), ("is_body_part", pa.bool_()),
])
RELATION_TYPE = pa.struct([
    ("subject", pa.int32()), ("object", pa.int32()), ("predicate", pa.string()),
    ("pass", pa.string()), ("gate", pa.string()), ("score", pa.float32()),
])
REJECTION_TYPE = pa.struct([
    ("subject", pa.int32()), ("object", pa.int32()), ("predicate", pa.string()),
    ("pass", pa.string()), ("rule", pa.string()),
])
TRIPLET_TYPE = pa.struct([
    ("subject", pa.int32()), ("object", pa.int32()), ("predicate", pa.string()),
    ("score", pa.float32()), ("spatial_score", pa.float32()), ("semantic_score", pa.float32()),
])

_IMAGE_FIELDS = [
    pa.field("image_id", pa.string(), nullable=False),
    pa.field("uri", pa.string(), nullable=False),
    pa.field("width", pa.int32(), nullable=False),
    pa.field("height", pa.int32(), nullable=False),
    pa.field("source", pa.string(), nullable=False),
    pa.field("split", pa.string()),
    pa.field("boxes", pa.list_(BOX_TYPE), nullable=False),
]
IMAGE_SCHEMA = pa.schema(_IMAGE_FIELDS)
PAIR_TYPE = pa.struct([("subject", pa.int32()), ("object", pa.int32())])
CORPUS_SCHEMA = pa.schema(_IMAGE_FIELDS + [pa.field("relations", pa.list_(RELATION_TYPE), nullable=False),
                                           pa.field("asked_pairs", pa.list_(PAIR_TYPE))])
# columns a table may lack (older files, other writers): filled with nulls when it is cast
_OPTIONAL_COLUMNS = ("split", "asked_pairs")
REJECTIONS_SCHEMA = pa.schema([
    pa.field("image_id", pa.string(), nullable=False),
    pa.field("rejected", pa.list_(REJECTION_TYPE), nullable=False),
])
PREDICTIONS_SCHEMA = pa.schema([
    pa.field("image_id", pa.string(), nullable=False),
    pa.field("triplets", pa.list_(TRIPLET_TYPE), nullable=False),
])

# predictions that carry objects: boxes in pixels, label (null: class-agnostic) and its score
OBJECT_TYPE = pa.struct([
    ("x1", pa.float32()), ("y1", pa.float32()), ("x2", pa.float32()), ("y2", pa.float32()),
    ("label", pa.string()), ("score", pa.float32()),
])
PREDICATES_KEY = b"relate.predicates"  # schema metadata: JSON list naming the pair_scores columns
# images per Parquet row group when writing scene graphs: one 10k-image group decodes on one core
# (1.4 s for 40M scores here), groups of 1,000 decode in parallel (0.5 s)
SCENE_GRAPHS_ROW_GROUP = 1000
SCENE_GRAPHS_SCHEMA = pa.schema([
    pa.field("image_id", pa.string(), nullable=False),
    pa.field("objects", pa.list_(OBJECT_TYPE), nullable=False),
    pa.field("pairs", pa.list_(PAIR_TYPE), nullable=False),
    # one inner list per pair, one score per predicate of the metadata's list: dense stays dense
    pa.field("pair_scores", pa.list_(pa.list_(pa.float32())), nullable=False),
    pa.field("triplets", pa.list_(TRIPLET_TYPE), nullable=False),
])

# one mR@K term: the image's GT triplets of one predicate and how many were credited within K
PREDICATE_HITS_TYPE = pa.struct([("predicate", pa.string()), ("hits", pa.int32()), ("n_gt", pa.int32())])
PER_IMAGE_SCHEMA = pa.schema([
    pa.field("system", pa.string(), nullable=False),
    pa.field("benchmark", pa.string(), nullable=False),
    pa.field("axis", pa.string(), nullable=False),
    pa.field("protocol", pa.string(), nullable=False),
    pa.field("mode", pa.string(), nullable=False),
    pa.field("matcher", pa.string(), nullable=False),
    pa.field("box_source", pa.string(), nullable=False),
    pa.field("image_id", pa.string(), nullable=False),
    pa.field("k", pa.int32(), nullable=False),
    pa.field("n_gt", pa.int32(), nullable=False),
    pa.field("hits", pa.int32(), nullable=False),
    pa.field("recall", pa.float64(), nullable=False),
    pa.field("predicates", pa.list_(PREDICATE_HITS_TYPE), nullable=False),
])


class SchemaError(ValueError):
    """A table does not match the data model; the message names table, row, field and value."""


@dataclass(frozen=True)
class _Where:
    table: str
    ids: Sequence[str] | None

    def row(self, i: int) -> str:
        tag = f"{self.table} row {i}"
        if self.ids is not None and 0 <= i < len(self.ids):
            tag += f" (image_id={self.ids[i]!r})"
        return tag


def to_table(rows: Iterable[Mapping[str, Any]] | pa.Table, schema: pa.Schema, *, table: str = "table") -> pa.Table:
    """Build a typed table from dicts (or cast an existing one), naming missing columns clearly."""
    if isinstance(rows, pa.Table):
        missing = [f.name for f in schema if f.name not in rows.column_names and f.name not in _OPTIONAL_COLUMNS]
        if missing:
            raise SchemaError(f"{table}: missing column(s) {missing}; expected {schema.names}")
        for name in _OPTIONAL_COLUMNS:
            if name in schema.names and name not in rows.column_names:
                rows = rows.append_column(name, pa.nulls(rows.num_rows, schema.field(name).type))
        try:
            return rows.select(schema.names).cast(schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
            raise SchemaError(f"{table}: cannot cast to the project schema: {exc}") from None
    rows = list(rows)
    for i, r in enumerate(rows):
        missing = [f.name for f in schema if not f.nullable and f.name not in r]
        if missing:
            raise SchemaError(f"{table} row {i}: missing field(s) {missing}")
    try:
        return pa.Table.from_pylist(rows, schema=schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as exc:
        raise SchemaError(f"{table}: a value has the wrong type: {exc}") from None


def _first_bad(mask: np.ndarray, parent: np.ndarray, where: _Where, field: str, what: str,
               values: np.ndarray | None = None, child: np.ndarray | None = None) -> None:
    """Raise for the first True in ``mask`` (flattened index), naming row and list position."""
    bad = np.flatnonzero(mask)
    if bad.size == 0:
        return
    k = int(bad[0])
    row = int(parent[k])
    pos = f"[{int(child[k])}]" if child is not None else ""
    v = values[k] if values is not None else None
    val = f" = {(v.item() if hasattr(v, 'item') else v)!r}" if values is not None else ""
    more = f" ({bad.size} bad value(s) in total)" if bad.size > 1 else ""
    raise SchemaError(f"{where.row(row)}: {field}{pos}{val}: {what}{more}")


def one_array(col: pa.ChunkedArray | pa.Array) -> pa.Array:
    """A column as one Array: a single chunk as it is (``combine_chunks`` copies even one chunk,
    64 MB of pair scores per sgdet row group), more chunks concatenated."""
    if not isinstance(col, pa.ChunkedArray):
        return col
    return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()


def _flatten(col: pa.ChunkedArray | pa.Array) -> tuple[pa.StructArray, np.ndarray, np.ndarray]:
    """Flatten a list<struct> column: (values, parent row per value, position within its list)."""
    arr = one_array(col)
    if arr.null_count:
        row = int(np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))[0])
        raise SchemaError(f"row {row}: list column is null (use an empty list)")
    parent = pc.list_parent_indices(arr).to_numpy()
    offsets = arr.offsets.to_numpy()
    child = np.arange(parent.size) - offsets[:-1][parent] + offsets[0] if parent.size else parent
    return arr.flatten(), parent, child


def _num(struct: pa.StructArray, name: str) -> np.ndarray:
    return struct.field(name).to_numpy(zero_copy_only=False).astype(np.float64)


def _check_strings(struct: pa.StructArray, name: str, parent, child, where: _Where, field: str,
                   allowed: Sequence[str] | None = None) -> None:
    arr = struct.field(name)
    nulls = arr.is_null().to_numpy(zero_copy_only=False)
    _first_bad(nulls, parent, where, f"{field}.{name}", "is null", child=child)
    empty = (pc.utf8_length(pc.utf8_trim_whitespace(arr.fill_null("x"))).to_numpy(zero_copy_only=False) == 0)
    _first_bad(empty, parent, where, f"{field}.{name}", "is an empty string", child=child)
    if allowed is not None:
        vals = arr.to_numpy(zero_copy_only=False)
        bad = ~np.isin(vals, np.asarray(allowed, dtype=object))
        _first_bad(bad, parent, where, f"{field}.{name}", f"must be one of {list(allowed)}", vals, child)


def _check_pairs(struct, parent, child, n_boxes, where: _Where, field: str, allow_self_loops: bool = False) -> None:
    s = struct.field("subject").to_numpy(zero_copy_only=False)
    o = struct.field("object").to_numpy(zero_copy_only=False)
    for name, idx in (("subject", s), ("object", o)):
        if idx.dtype == object:  # nulls present
            _first_bad(np.array([v is None for v in idx]), parent, where, f"{field}.{name}", "is null", child=child)
        nb = n_boxes[parent]
        bad = (idx < 0) | (idx >= nb)
        _first_bad(bad, parent, where, f"{field}.{name}",
                   f"index out of range for the image's boxes (has {nb[bad][0] if bad.any() else 0})", idx, child)
    if not allow_self_loops:
        _first_bad(s == o, parent, where, field, "self-loop: subject == object", s, child)


def _ids(table: pa.Table) -> list[str] | None:
    return table.column("image_id").to_pylist() if "image_id" in table.column_names else None


def validate_images(table: pa.Table, *, name: str = "images", allow_flat_boxes: bool = False) -> np.ndarray:
    """Check image records and their boxes; returns the number of boxes per image.

    ``allow_flat_boxes`` accepts x2 == x1 (or y2 == y1): Scene-Graph-Benchmark clips a box that
    starts on the last pixel column to zero extent and, counting ``x2 - x1 + 1`` pixels, still
    scores it as one pixel wide; its ground truth under the ``sgb`` protocol needs them as they are.
    """
    where = _Where(name, _ids(table))
    for col in ("image_id", "uri", "source"):
        arr = table.column(col).combine_chunks()
        bad = arr.is_null().to_numpy(zero_copy_only=False) | (pc.utf8_length(arr.fill_null("")).to_numpy(zero_copy_only=False) == 0)
        _first_bad(bad, np.arange(table.num_rows), where, col, "is null or empty")
    dup = pc.value_counts(table.column("image_id").combine_chunks())
    dups = [d["values"] for d in dup.to_pylist() if d["counts"] > 1]
    if dups:
        raise SchemaError(f"{name}: duplicate image_id(s) {dups[:5]}")
    w = table.column("width").to_numpy().astype(np.float64)
    h = table.column("height").to_numpy().astype(np.float64)
    rows = np.arange(table.num_rows)
    _first_bad(w <= 0, rows, where, "width", "must be positive", w)
    _first_bad(h <= 0, rows, where, "height", "must be positive", h)
    boxes, parent, child = _flatten(table.column("boxes"))
    x1, y1, x2, y2 = (_num(boxes, k) for k in ("x1", "y1", "x2", "y2"))
    for k, v in (("x1", x1), ("y1", y1), ("x2", x2), ("y2", y2)):
        _first_bad(~np.isfinite(v), parent, where, f"boxes.{k}", "is NaN or infinite", v, child)
        _first_bad(v < 0, parent, where, f"boxes.{k}", "is negative", v, child)
    if allow_flat_boxes:
        _first_bad(x2 < x1, parent, where, "boxes.x2", "must not be smaller than x1 (inverted box)", x2, child)
        _first_bad(y2 < y1, parent, where, "boxes.y2", "must not be smaller than y1 (inverted box)", y2, child)
    else:
        _first_bad(x2 <= x1, parent, where, "boxes.x2", "must be greater than x1 (inverted or empty box)", x2, child)
        _first_bad(y2 <= y1, parent, where, "boxes.y2", "must be greater than y1 (inverted or empty box)", y2, child)
    _first_bad(x2 > w[parent] + 0.5, parent, where, "boxes.x2", "lies beyond the image width", x2, child)
    _first_bad(y2 > h[parent] + 0.5, parent, where, "boxes.y2", "lies beyond the image height", y2, child)
    return pc.list_value_length(table.column("boxes").combine_chunks()).to_numpy(zero_copy_only=False).astype(np.int64)


def validate_corpus(table: pa.Table, *, name: str = "corpus", allow_self_loops: bool = False,
                    allow_flat_boxes: bool = False) -> None:
    """Images and boxes as :func:`validate_images`, plus every relation against its boxes.

    The two ``allow_*`` switches admit what Scene-Graph-Benchmark's loader keeps and the project
    otherwise refuses (a relation from a box to itself; a box clipped to zero extent), for ground
    truth read under the ``sgb`` protocol only; nothing is trained on such a table.
    """
    n_boxes = validate_images(table, name=name, allow_flat_boxes=allow_flat_boxes)
    where = _Where(name, _ids(table))
    rel, parent, child = _flatten(table.column("relations"))
    _check_pairs(rel, parent, child, n_boxes, where, "relations", allow_self_loops)
    _check_strings(rel, "predicate", parent, child, where, "relations")
    _check_strings(rel, "pass", parent, child, where, "relations", PASSES)
    _check_strings(rel, "gate", parent, child, where, "relations", GATE_OUTCOMES)
    score = _num(rel, "score")
    present = ~rel.field("score").is_null().to_numpy(zero_copy_only=False)
    _first_bad(present & ~np.isfinite(score), parent, where, "relations.score", "is NaN or infinite", score, child)
    if "asked_pairs" in table.column_names and table.column("asked_pairs").null_count < table.num_rows:
        col = one_array(table.column("asked_pairs"))  # null: no pass asked (an empty list: asked of none)
        col = pc.fill_null(col, pa.scalar([], type=col.type))
        asked, parent, child = _flatten(col)
        _check_pairs(asked, parent, child, n_boxes, where, "asked_pairs", False)


def validate_rejections(table: pa.Table, n_boxes: Mapping[str, int] | None = None, *, name: str = "rejections") -> None:
    """Rejections keep the relation as proposed, so only types, strings and the rule are checked
    (indices may legitimately be out of range: that is often why a candidate was rejected)."""
    where = _Where(name, _ids(table))
    rej, parent, child = _flatten(table.column("rejected"))
    _check_strings(rej, "rule", parent, child, where, "rejected")
    _check_strings(rej, "pass", parent, child, where, "rejected", PASSES)


def _check_triplets(column, n_boxes: np.ndarray | None, where: _Where) -> None:
    """Finite scores, a score on every triplet, predicate strings, and (given each image's box
    count) subject/object indices in range."""
    tri, parent, child = _flatten(column)
    for k in ("score", "spatial_score", "semantic_score"):
        v = _num(tri, k)
        present = ~tri.field(k).is_null().to_numpy(zero_copy_only=False)
        _first_bad(present & ~np.isfinite(v), parent, where, f"triplets.{k}", "is NaN or infinite", v, child)
    _first_bad(tri.field("score").is_null().to_numpy(zero_copy_only=False), parent, where,
               "triplets.score", "is null", child=child)
    _check_strings(tri, "predicate", parent, child, where, "triplets")
    if n_boxes is not None:
        _check_pairs(tri, parent, child, n_boxes, where, "triplets")


def validate_predictions(table: pa.Table, n_boxes: Mapping[str, int] | None = None, *,
                         name: str = "predictions") -> None:
    """Scores must be finite; indices in range when the image's box counts are given."""
    missing = [c for c in PREDICTIONS_SCHEMA.names if c not in table.column_names]
    if missing:
        raise SchemaError(f"{name}: missing column(s) {missing}; expected {PREDICTIONS_SCHEMA.names}")
    where = _Where(name, _ids(table))
    nb = None
    if n_boxes is not None:
        ids = table.column("image_id").to_pylist()
        unknown = [i for i in ids if i not in n_boxes]
        if unknown:
            raise SchemaError(f"{name}: image_id(s) not in the ground truth: {unknown[:5]}")
        nb = np.array([n_boxes[i] for i in ids], dtype=np.int64)
    _check_triplets(table.column("triplets"), nb, where)


# --------------------------------------------------------------------------- scene graphs

def scene_graphs_schema(predicates: Sequence[str]) -> pa.Schema:
    """SCENE_GRAPHS_SCHEMA carrying ``predicates`` (the order of every pair_scores list) as metadata."""
    names = [str(p) for p in predicates]
    dup = sorted({p for p in names if names.count(p) > 1})
    if dup or any(not p.strip() for p in names):
        raise SchemaError(f"scene_graphs: predicate list must hold distinct non-empty strings; repeated: {dup[:5]}")
    return SCENE_GRAPHS_SCHEMA.with_metadata({PREDICATES_KEY: json.dumps(names).encode()})


def scene_graph_predicates(schema: pa.Schema, *, name: str = "scene_graphs") -> list[str] | None:
    """The predicate list a scene-graphs file stores in its schema metadata (None when absent)."""
    raw = (schema.metadata or {}).get(PREDICATES_KEY)
    if raw is None:
        return None
    try:
        names = json.loads(raw)
    except ValueError:
        raise SchemaError(f"{name}: schema metadata {PREDICATES_KEY.decode()!r} is not a JSON list") from None
    if not isinstance(names, list) or not all(isinstance(p, str) for p in names):
        raise SchemaError(f"{name}: schema metadata {PREDICATES_KEY.decode()!r} must be a JSON list of strings")
    return names


def _list_col(table: pa.Table, col: str, where: _Where) -> pa.Array:
    arr = one_array(table.column(col))
    if arr.null_count:
        row = int(np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))[0])
        raise SchemaError(f"{where.row(row)}: {col} is null (use an empty list)")
    return arr


def _check_objects(table: pa.Table, where: _Where) -> np.ndarray:
    arr = _list_col(table, "objects", where)
    obj, parent, child = _flatten(arr)
    x1, y1, x2, y2, sc = (_num(obj, k) for k in ("x1", "y1", "x2", "y2", "score"))
    for k, v in (("x1", x1), ("y1", y1), ("x2", x2), ("y2", y2), ("score", sc)):
        _first_bad(~np.isfinite(v), parent, where, f"objects.{k}", "is null, NaN or infinite", v, child)
    _first_bad(x2 < x1, parent, where, "objects.x2", "is smaller than x1 (inverted box)", x2, child)
    _first_bad(y2 < y1, parent, where, "objects.y2", "is smaller than y1 (inverted box)", y2, child)
    lab = obj.field("label")
    empty = pc.utf8_length(pc.utf8_trim_whitespace(lab.fill_null("x"))).to_numpy(zero_copy_only=False) == 0
    _first_bad(empty, parent, where, "objects.label", "is an empty string (use null for no label)", child=child)
    return pc.list_value_length(arr).to_numpy(zero_copy_only=False).astype(np.int64)


def _check_scores(table: pa.Table, n_pairs: np.ndarray, n_predicates: int | None, where: _Where) -> None:
    """pair_scores: one list per pair, each of the predicate list's length, all finite; checked on
    the flat float buffer in one pass: NaN or an infinity makes its sum non-finite (so can an
    overflow, which only sends the check to the exact, value-by-value pass that names the place)."""
    arr = _list_col(table, "pair_scores", where)
    rows = np.arange(table.num_rows)
    per_row = pc.list_value_length(arr).to_numpy(zero_copy_only=False).astype(np.int64)
    _first_bad(per_row != n_pairs, rows, where, "pair_scores", f"has a different length from pairs "
               f"({n_pairs[per_row != n_pairs][0] if (per_row != n_pairs).any() else 0} pair(s))", per_row)
    inner = arr.flatten()
    if len(inner) == 0:
        return
    if n_predicates is None:
        raise SchemaError(f"{where.table}: pair_scores present but the schema metadata names no predicate "
                          f"list ({PREDICATES_KEY.decode()!r}); write the file with scene_graphs_schema(predicates)")

    def located() -> tuple[np.ndarray, np.ndarray]:  # (file row, place in its list) of each pair
        pair_row = pc.list_parent_indices(arr).to_numpy()
        off = arr.offsets.to_numpy()
        return pair_row, np.arange(pair_row.size) - off[:-1][pair_row] + off[0]

    if inner.null_count:
        pair_row, pos = located()
        _first_bad(inner.is_null().to_numpy(zero_copy_only=False), pair_row, where, "pair_scores", "is null", child=pos)
    size = pc.list_value_length(inner).to_numpy(zero_copy_only=False)
    if (size != n_predicates).any():
        pair_row, pos = located()
        _first_bad(size != n_predicates, pair_row, where, "pair_scores",
                   f"must hold one score per predicate ({n_predicates})", size, pos)
    values = inner.flatten()
    v = values.to_numpy(zero_copy_only=False) if values.null_count else values.to_numpy()
    if v.dtype != object:
        with np.errstate(over="ignore", invalid="ignore"):
            if np.isfinite(v.sum()):  # NaN and either infinity make the sum non-finite
                return
    ok = np.isfinite(v) if v.dtype != object else np.array([x is not None and np.isfinite(x) for x in v])
    if not ok.all():
        pair_row, pos = located()
        k = int(np.flatnonzero(~ok)[0])
        pair, col = divmod(k, n_predicates)
        raise SchemaError(f"{where.row(int(pair_row[pair]))}: pair_scores[{int(pos[pair])}][{col}] = {float(v[k]) if v[k] is not None else None!r}: "
                          f"is null, NaN or infinite ({int((~ok).sum())} bad value(s) in total)")


def validate_scene_graphs(table: pa.Table, *, name: str = "scene_graphs") -> np.ndarray:
    """Check a SCENE_GRAPHS_SCHEMA table; returns the number of objects per row.

    Objects: finite boxes (x2 >= x1, y2 >= y1), a finite label score, a label that is null or a
    non-empty string. Pairs: indices into the row's objects, no self-loop, no pair twice.
    pair_scores: one list per pair with one finite score per predicate of the metadata's list.
    Triplets: finite scores, non-empty predicates, indices into the row's objects.
    """
    missing = [c for c in SCENE_GRAPHS_SCHEMA.names if c not in table.column_names]
    if missing:
        raise SchemaError(f"{name}: missing column(s) {missing}; expected {SCENE_GRAPHS_SCHEMA.names}")
    where = _Where(name, _ids(table))
    arr = table.column("image_id").combine_chunks()
    bad = arr.is_null().to_numpy(zero_copy_only=False) | (pc.utf8_length(arr.fill_null("")).to_numpy(zero_copy_only=False) == 0)
    _first_bad(bad, np.arange(table.num_rows), where, "image_id", "is null or empty")
    dups = [d["values"] for d in pc.value_counts(arr).to_pylist() if d["counts"] > 1]
    if dups:
        raise SchemaError(f"{name}: image_id(s) in more than one row: {dups[:5]}; one row per image")
    n_obj = _check_objects(table, where)
    pairs = _list_col(table, "pairs", where)
    pr, parent, child = _flatten(pairs)
    _check_pairs(pr, parent, child, n_obj, where, "pairs")
    if len(pr):
        key = (parent * (n_obj.max() + 1) + pr.field("subject").to_numpy()) * (n_obj.max() + 1) + pr.field("object").to_numpy()
        # a dense output's keys fill a small range: counting them is one pass, sorting them many
        if not (int(key.max()) < 8 * key.size + 1024 and np.bincount(key).max() <= 1):
            order = np.argsort(key, kind="stable")
            again = np.zeros(key.size, bool)
            again[order[1:]] = key[order[1:]] == key[order[:-1]]
            _first_bad(again, parent, where, "pairs", "the same (subject, object) pair is listed twice in the image",
                       child=child)
    n_pairs = pc.list_value_length(pairs).to_numpy(zero_copy_only=False).astype(np.int64)
    preds = scene_graph_predicates(table.schema, name=name)
    _check_scores(table, n_pairs, None if preds is None else len(preds), where)
    _check_triplets(_list_col(table, "triplets", where), n_obj, where)
    return n_obj
