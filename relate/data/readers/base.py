"""What every benchmark reader returns, and the registry readers are looked up in.

A reader parses one native layout into the project's CORPUS_SCHEMA table (positives on their
boxes) and, for benchmarks that adjudicate negatives (Haystack, SpatialSense, HICO-DET
``no_interaction``), a table of labelled cells: (subject, object, predicate, label). A labelled
cell is what federated metrics score; an unlabelled cell is unknown, never negative.

Readers follow the field's own loaders on the real files. Where this project cannot (the schema
refuses a self-loop, say), the reader counts what it changed in ``BenchmarkData.notes`` instead of
changing it silently. A split that yields no image is an error (:class:`EmptySplitError`), and
``read_benchmark(..., exclude=FILE)`` drops the images a leakage exclusion list names.

Image ids are namespaced by the dataset whose ids they are (:func:`image_key`): ``vg:2343`` and
``coco:2343`` are different photographs, so exclusion lists name ``<namespace>:<id>`` and a reader
drops an image only when its own namespace and id are listed.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from relate.registry import Registry
from relate.schema import CORPUS_SCHEMA, SchemaError, to_table, validate_corpus

__all__ = ["CELL_TYPE", "CELLS_SCHEMA", "BenchmarkData", "READERS", "EmptySplitError", "read_benchmark",
           "make_box", "build_tables", "require_images", "normalise_image_id", "load_exclusions",
           "exclude_images", "IMAGE_NAMESPACES", "image_namespace", "image_key", "parse_image_key"]

CELL_TYPE = pa.struct([("subject", pa.int32()), ("object", pa.int32()), ("predicate", pa.string()),
                       ("label", pa.bool_())])
CELLS_SCHEMA = pa.schema([pa.field("image_id", pa.string(), nullable=False),
                          pa.field("cells", pa.list_(CELL_TYPE), nullable=False)])

READERS: Registry[Callable[..., "BenchmarkData"]] = Registry("benchmark reader")


class EmptySplitError(ValueError):
    """A split read to zero images: a wrong split name or a wrong file, never an empty benchmark."""


@dataclass(frozen=True)
class BenchmarkData:
    """One split of one benchmark in the project schema."""

    name: str
    corpus: pa.Table                 # CORPUS_SCHEMA
    cells: pa.Table | None = None    # CELLS_SCHEMA, only where negatives are adjudicated
    predicates: tuple[str, ...] = () # the benchmark's own predicate vocabulary, in its order
    notes: Mapping[str, int] = field(default_factory=dict)  # what the reader skipped or changed, by reason
    excluded: tuple[str, ...] = ()   # image ids removed by a leakage exclusion list
    # images / boxes / relations the field's reference loader keeps for this split (VG150, IndoorVG:
    # Scene-Graph-Benchmark's load_graphs), counted from the native file's index ranges rather than
    # from the rows built, so a reader that loses or adds a row shows against it; {} where none
    loader_rows: Mapping[str, int] = field(default_factory=dict)

    @property
    def vocabulary_size(self) -> int:
        return len(self.predicates)

    def row_counts(self) -> dict[str, int]:
        """Images, boxes and relation rows of the corpus as read (a repeated relation counts each time)."""
        count = lambda col: int(pc.sum(pc.list_value_length(self.corpus.column(col))).as_py() or 0)  # noqa: E731
        return {"images": self.corpus.num_rows, "boxes": count("boxes"), "relations": count("relations")}

    def gt_rows(self) -> dict[str, Any] | None:
        """The reference loader's counts beside this reader's, and whether they agree; None when the
        reader follows no reference loader. Results carry it so a parity claim is checked per run."""
        if not self.loader_rows:
            return None
        read = self.row_counts()
        out = {"reference_loader": dict(self.loader_rows), "reader": read,
               "equal": all(read.get(k) == v for k, v in self.loader_rows.items())}
        if self.excluded:  # a leakage list removes images the reference loader would score
            out["excluded_images"] = len(self.excluded)
        return out


def make_box(x1: float, y1: float, x2: float, y2: float, category: str | None) -> dict[str, Any]:
    return {"x1": float(x1), "y1": float(y1), "x2": float(x2), "y2": float(y2), "category": category,
            "is_person": category is not None and category.lower() in ("person", "man", "woman", "people"),
            "is_body_part": False}


def require_images(rows: list, *, name: str, where: str | Path, split: str, present: Iterable[str] = ()) -> None:
    """Raise :class:`EmptySplitError` when a split yields no image, naming the file and the splits it has."""
    if rows:
        return
    have = sorted({str(s) for s in present})
    raise EmptySplitError(f"{name}: split {split!r} of {where} yields no images"
                          + (f"; the file holds images of split(s) {have}" if have else ""))


def build_tables(name: str, images: Iterable[Mapping[str, Any]], *, allow_self_loops: bool = False,
                 allow_flat_boxes: bool = False) -> tuple[pa.Table, pa.Table | None]:
    """Rows with boxes/relations (and optional ``cells``) -> validated corpus (+ cells) tables.
    The ``allow_*`` switches are :func:`relate.schema.validate_corpus`'s (``sgb`` ground truth only)."""
    rows, cell_rows, any_cells = [], [], False
    for r in images:
        r = dict(r)
        cells = r.pop("cells", None)
        any_cells |= cells is not None
        cell_rows.append({"image_id": r["image_id"], "cells": cells or []})
        rows.append(r)
    corpus = to_table(rows, CORPUS_SCHEMA, table=name)
    validate_corpus(corpus, name=name, allow_self_loops=allow_self_loops, allow_flat_boxes=allow_flat_boxes)
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


def normalise_image_id(x: Any) -> str:
    """Ids compare as strings without surrounding space or leading zeros (000123 == 123), the rule of
    the leakage filter (pipelines.leakage), so a list it writes matches ids spelled either way."""
    s = str(x).strip()
    return (s.lstrip("0") or "0") if s.isdigit() else s


# whose ids a corpus ``source`` uses: the VG150 and IndoorVG splits number Visual Genome images, PSG
# and Haystack (built on PSG) number COCO images; any other source is its own namespace
IMAGE_NAMESPACES = {"vg150": "vg", "indoorvg": "vg", "vg": "vg", "visual_genome": "vg",
                    "psg": "coco", "haystack": "coco", "coco": "coco", "hico_det": "hico", "hico": "hico",
                    "spatialsense": "spatialsense", "synthetic": "synthetic"}
_NAMESPACE = re.compile(r"[a-z][a-z0-9_.-]*")


def image_namespace(source: str) -> str:
    """The id namespace of a corpus ``source`` (``vg150`` -> ``vg``, ``psg`` -> ``coco``)."""
    ns = IMAGE_NAMESPACES.get(str(source).strip().lower(), str(source).strip().lower())
    if not _NAMESPACE.fullmatch(ns):
        raise ValueError(f"source {source!r} is not usable as an image id namespace "
                         f"(lower-case letters, digits, '_', '.', '-', starting with a letter)")
    return ns


def image_key(source: str, image_id: Any) -> str:
    """An image's identity across datasets: ``<namespace>:<normalised id>`` (``vg150``, ``000123`` -> ``vg:123``)."""
    return f"{image_namespace(source)}:{normalise_image_id(image_id)}"


def parse_image_key(text: str, where: str = "") -> str:
    """A namespaced id as written in a list (``coco:000139``) -> its normal form (``coco:139``).

    A bare id (``139``) is refused: lists written before ids were namespaced matched an id in
    every dataset at once (a COCO and a VG image with the same digits), so they must be rewritten."""
    s = str(text).strip()
    ns, sep, iid = s.partition(":")
    ns = ns.strip().lower()
    if not sep or not iid.strip() or not _NAMESPACE.fullmatch(ns):
        at = f"{where}: " if where else ""
        raise ValueError(f"{at}image id {s!r} names no dataset; write <namespace>:<id>, e.g. coco:{s or '139'} or "
                         f"vg:{s or '139'} (namespaces: {sorted(set(IMAGE_NAMESPACES.values()))} or a corpus "
                         f"source). A list from before ids were namespaced: rerun pipelines.leakage, or prefix "
                         f"each id with the dataset it belongs to")
    return f"{IMAGE_NAMESPACES.get(ns, ns)}:{normalise_image_id(iid)}"


def load_exclusions(path: str | Path) -> set[str]:
    """Namespaced image keys (``vg:123``) from an exclusion list: the leakage job's
    ``excluded_ids.csv`` (header ``image_id,reason``) or a plain text file with one id per line
    (``#`` starts a comment). Every id must name its dataset (see :func:`parse_image_key`)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"exclusion list {p} not found")
    out: set[str] = set()
    if p.suffix.lower() == ".csv":
        with open(p, newline="") as fh:
            for i, row in enumerate(csv.reader(fh)):
                if not row or (i == 0 and row[0].strip().lower() == "image_id"):
                    continue
                out.add(parse_image_key(row[0], f"{p} line {i + 1}"))
        return out
    for n, line in enumerate(p.read_text().splitlines()):
        line = line.split("#", 1)[0].strip()
        if line:
            out.add(parse_image_key(line, f"{p} line {n + 1}"))
    return out


def exclude_images(data: BenchmarkData, ids: set[str], *, source: str = "exclusion list") -> BenchmarkData:
    """Drop the images whose namespaced key (:func:`image_key` of their ``source`` and id) is in
    ``ids`` from corpus and cells; refuse an empty result."""
    got = data.corpus.column("image_id").to_pylist()
    sources = data.corpus.column("source").to_pylist()
    drop = [i for i, src in zip(got, sources) if image_key(src, i) in ids]
    if not drop:
        return replace(data, excluded=())
    if len(drop) == len(got):
        raise EmptySplitError(f"{data.name}: the exclusion list {source} removes all {len(got)} images")
    gone = set(drop)
    corpus = data.corpus.filter(pa.array([i not in gone for i in got]))
    cells = data.cells
    if cells is not None:
        cells = cells.filter(pc.invert(pc.is_in(cells.column("image_id"), pa.array(drop))))
    return replace(data, corpus=corpus, cells=cells, excluded=tuple(sorted(drop)))


def read_benchmark(name: str, path: str, *, exclude: str | None = None, **kwargs: Any) -> BenchmarkData:
    """Look up a registered reader by name (``vg150``, ``psg``, ...) and read ``path`` with it;
    ``exclude`` names a leakage exclusion list (see :func:`load_exclusions`) applied after reading."""
    data = READERS.get(name)(path, **kwargs)
    if exclude:
        data = exclude_images(data, load_exclusions(exclude), source=str(exclude))
    return data


def _clip_box(b: np.ndarray, w: float, h: float) -> np.ndarray:
    out = b.astype(np.float64).copy()
    out[..., [0, 2]] = np.clip(out[..., [0, 2]], 0, w)
    out[..., [1, 3]] = np.clip(out[..., [1, 3]], 0, h)
    return out
