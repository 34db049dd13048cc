"""What every benchmark reader returns, and the registry readers are looked up in.

A reader parses one native layout into the project's CORPUS_SCHEMA table (positives on their
boxes) and, for benchmarks that adjudicate negatives (Haystack, SpatialSense, HICO-DET
``no_interaction``), a table of labelled cells: (subject, object, predicate, label). A labelled
cell is what federated metrics score; an unlabelled cell is unknown, never negative.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

import numpy as np
import pyarrow as pa

from relate.registry import Registry
from relate.schema import CORPUS_SCHEMA, SchemaError, to_table, validate_corpus

__all__ = ["CELL_TYPE", "CELLS_SCHEMA", "BenchmarkData", "READERS", "read_benchmark", "make_box",
           "build_tables"]

CELL_TYPE = pa.struct([("subject", pa.int32()), ("object", pa.int32()), ("predicate", pa.string()),
                       ("label", pa.bool_())])
CELLS_SCHEMA = pa.schema([pa.field("image_id", pa.string(), nullable=False),
                          pa.field("cells", pa.list_(CELL_TYPE), nullable=False)])

READERS: Registry[Callable[..., "BenchmarkData"]] = Registry("benchmark reader")


@dataclass(frozen=True)
class BenchmarkData:
    """One split of one benchmark in the project schema."""

    name: str
    corpus: pa.Table                 # CORPUS_SCHEMA
    cells: pa.Table | None = None    # CELLS_SCHEMA, only where negatives are adjudicated
    predicates: tuple[str, ...] = () # the benchmark's own predicate vocabulary, in its order

    @property
    def vocabulary_size(self) -> int:
        return len(self.predicates)


def make_box(x1: float, y1: float, x2: float, y2: float, category: str | None) -> dict[str, Any]:
    return {"x1": float(x1), "y1": float(y1), "x2": float(x2), "y2": float(y2), "category": category,
            "is_person": category is not None and category.lower() in ("person", "man", "woman", "people"),
            "is_body_part": False}


def build_tables(name: str, images: Iterable[Mapping[str, Any]]) -> tuple[pa.Table, pa.Table | None]:
    """Rows with boxes/relations (and optional ``cells``) -> validated corpus (+ cells) tables."""
    rows, cell_rows, any_cells = [], [], False
    for r in images:
        r = dict(r)
        cells = r.pop("cells", None)
        any_cells |= cells is not None
        cell_rows.append({"image_id": r["image_id"], "cells": cells or []})
        rows.append(r)
    corpus = to_table(rows, CORPUS_SCHEMA, table=name)
    validate_corpus(corpus, name=name)
    if not any_cells:
        return corpus, None
    cells = to_table(cell_rows, CELLS_SCHEMA, table=f"{name} cells")
    nb = dict(zip(corpus.column("image_id").to_pylist(),
                  [len(b) for b in corpus.column("boxes").to_pylist()]))
    for i, r in enumerate(cell_rows):
        for c in r["cells"]:
            if not (0 <= c["subject"] < nb[r["image_id"]] and 0 <= c["object"] < nb[r["image_id"]]):
                raise SchemaError(f"{name} cells row {i} (image_id={r['image_id']!r}): cell "
                                  f"({c['subject']}, {c['object']}) beyond the image's {nb[r['image_id']]} boxes")
    return corpus, cells


def read_benchmark(name: str, path: str, **kwargs: Any) -> BenchmarkData:
    """Look up a registered reader by name (``vg150``, ``psg``, ...) and read ``path`` with it."""
    return READERS.get(name)(path, **kwargs)


def _clip_box(b: np.ndarray, w: float, h: float) -> np.ndarray:
    out = b.astype(np.float64).copy()
    out[..., [0, 2]] = np.clip(out[..., [0, 2]], 0, w)
    out[..., [1, 3]] = np.clip(out[..., [1, 3]], 0, h)
    return out
