"""What the annotation job reads: a run folder of image records, or your own images plus boxes.

Two inputs, one output (image records with a ``reference`` column, empty when there are no
relations yet):

* a run folder with ``corpus/<split>/*.parquet``: image records with boxes, with or without a
  ``relations`` column (the synthetic world has one; a detector's output usually does not);
* a folder of images and a boxes file (JSON Lines), one line per image::

      {"image": "street/0001.jpg", "boxes": [[12, 40, 200, 380], [150, 90, 420, 300]], "categories": ["person", "bicycle"]}

  ``image`` is relative to the folder (or absolute); ``boxes`` are pixel ``[x1, y1, x2, y2]``
  (or objects with x1..y2 and an optional ``category``); ``categories`` is optional (null
  categories are allowed); ``image_id`` defaults to the image path without its suffix, and
  ``width``/``height`` default to the file's own size, read when the image is decoded.

Nothing here opens an image: records are checked where the pixels are read (a bad image becomes
a rejection row, see :mod:`pipelines.annotate_images`), so planning stays cheap on the driver.
"""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import Field

from relate.config import StrictConfig
from relate.data.corpus import SPLITS, corpus_dir
from relate.schema import BOX_TYPE, RELATION_TYPE, SchemaError

__all__ = ["ImagesInput", "RECORDS_SCHEMA", "read_records", "read_boxes_file", "iter_boxes_file", "split_files",
           "check_input_schema", "source_columns", "as_records"]

_RECORD_FIELDS = [("image_id", pa.string()), ("uri", pa.string()), ("width", pa.int32()), ("height", pa.int32()),
                  ("source", pa.string()), ("split", pa.string()), ("boxes", pa.list_(BOX_TYPE)),
                  ("reference", pa.list_(RELATION_TYPE))]
RECORDS_SCHEMA = pa.schema(_RECORD_FIELDS)


class ImagesInput(StrictConfig):
    """Your own images: a folder plus a JSON Lines file of boxes (see the module docstring)."""

    images_dir: str = Field(..., description="Folder the image paths of the boxes file are relative to.")
    boxes_file: str = Field(..., description="JSON Lines file: one {image, boxes, categories?, image_id?, width?, height?} per line.")
    split: str = Field("train", description="Split the images are written under.")
    source: str = Field("user", description="Corpus name recorded in each image record's 'source'.")
    person_categories: list[str] = Field(default_factory=lambda: ["person", "man", "woman", "boy", "girl", "child", "people"],
                                         description="Categories flagged is_person (for the gate's person rules), compared lower-case.")
    body_part_categories: list[str] = Field(default_factory=lambda: ["hand", "arm", "head", "face", "leg", "foot", "ear", "eye",
                                                                     "hair", "nose", "mouth", "finger"],
                                            description="Categories flagged is_body_part (for the gate's body-part rules), compared lower-case.")


def _box(b, category, line: int, cfg: ImagesInput) -> dict:
    if isinstance(b, dict):
        coords = [b.get(k) for k in ("x1", "y1", "x2", "y2")]
        category = b.get("category", category)
    else:
        coords = list(b)
    if len(coords) != 4 or any(not isinstance(v, (int, float)) or isinstance(v, bool) for v in coords):
        raise ValueError(f"boxes file line {line}: a box must be [x1, y1, x2, y2] numbers in pixels, got {b!r}")
    cat = None if category is None else str(category)
    low = (cat or "").lower()
    return dict(x1=float(coords[0]), y1=float(coords[1]), x2=float(coords[2]), y2=float(coords[3]), category=cat,
                is_person=low in {c.lower() for c in cfg.person_categories},
                is_body_part=low in {c.lower() for c in cfg.body_part_categories})


def iter_boxes_file(cfg: ImagesInput, chunk_rows: int = 4096):
    """The boxes file as image records (``reference`` empty), in file order, ``chunk_rows`` at a
    time (only the image ids are kept across chunks, to refuse a repeated one)."""
    if cfg.split not in SPLITS:
        raise ValueError(f"images.split={cfg.split!r}; valid: {list(SPLITS)}")
    root, rows, seen = Path(cfg.images_dir), [], {}
    path = Path(cfg.boxes_file)
    if not path.is_file():
        raise FileNotFoundError(f"images.boxes_file {path} does not exist")
    with open(path) as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path} line {n}: not JSON ({exc})") from None
            if not isinstance(d, dict) or "image" not in d or "boxes" not in d:
                raise ValueError(f"{path} line {n}: needs 'image' and 'boxes' (optional: categories, image_id, width, height)")
            cats = d.get("categories") or [None] * len(d["boxes"])
            if len(cats) != len(d["boxes"]):
                raise ValueError(f"{path} line {n}: {len(d['boxes'])} boxes but {len(cats)} categories")
            image_id = str(d.get("image_id") or PurePosixPath(d["image"]).with_suffix("").as_posix())
            if image_id in seen:
                raise ValueError(f"{path} line {n}: image_id {image_id!r} repeats line {seen[image_id]}")
            seen[image_id] = n
            rows.append(dict(image_id=image_id, uri=str(root / d["image"]), width=int(d.get("width") or 0),
                             height=int(d.get("height") or 0), source=cfg.source, split=cfg.split,
                             boxes=[_box(b, c, n, cfg) for b, c in zip(d["boxes"], cats)], reference=[]))
            if len(rows) == chunk_rows:
                yield pa.Table.from_pylist(rows, schema=RECORDS_SCHEMA)
                rows = []
    if rows:
        yield pa.Table.from_pylist(rows, schema=RECORDS_SCHEMA)


def read_boxes_file(cfg: ImagesInput) -> pa.Table:
    """The boxes file as image records (``reference`` empty), in file order."""
    return pa.concat_tables([RECORDS_SCHEMA.empty_table(), *iter_boxes_file(cfg)])


def split_files(input_dir: str, split: str) -> list[Path]:
    """The Parquet files of a split of a run folder, in name order."""
    return sorted((corpus_dir(input_dir) / split).glob("*.parquet"))


def check_input_schema(path: Path, schema: pa.Schema) -> None:
    """Refuse an input file without the columns every record needs."""
    missing = [n for n in ("image_id", "uri", "boxes") if n not in schema.names]
    if missing:
        raise SchemaError(f"{path}: missing column(s) {missing}; an input needs image_id, uri and boxes")


def source_columns(schema: pa.Schema) -> list[str]:
    """The columns of an input file that a record is made from (others are never read)."""
    wanted = {"relations" if name == "reference" else name for name, _ in _RECORD_FIELDS}
    return [n for n in schema.names if n in wanted]


def as_records(t: pa.Table, split: str) -> pa.Table:
    """Rows of an input file (any of its columns) as image records (RECORDS_SCHEMA); absent
    optional columns get their defaults."""
    cols = {}
    for name, typ in _RECORD_FIELDS:
        src = "relations" if name == "reference" else name
        if src in t.column_names:
            cols[name] = t.column(src).cast(typ)
        elif name == "reference":
            cols[name] = pa.array([[]] * t.num_rows, typ)
        elif name == "split":
            cols[name] = pa.array([split] * t.num_rows, typ)
        elif name == "source":
            cols[name] = pa.array(["user"] * t.num_rows, typ)
        else:  # width/height: 0 = take the file's size when it is decoded
            cols[name] = pa.array([0] * t.num_rows, typ)
    return pa.table(cols, schema=RECORDS_SCHEMA)


def _read_split(input_dir: str, split: str) -> pa.Table | None:
    files = split_files(input_dir, split)
    if not files:
        return None
    tables = []
    for f in files:
        t = pq.read_table(f)
        check_input_schema(f, t.schema)
        tables.append(as_records(t, split))
    return pa.concat_tables(tables)


def read_records(input_dir: str, splits: list[str], images: ImagesInput | None) -> dict[str, pa.Table]:
    """Input records per split, sorted by image id (the order shards are cut in)."""
    if images is not None:
        t = read_boxes_file(images)
        return {images.split: t.sort_by("image_id")} if t.num_rows else {}
    out = {}
    for split in splits:
        t = _read_split(input_dir, split)
        if t is not None and t.num_rows:
            out[split] = t.sort_by("image_id")
    return out
