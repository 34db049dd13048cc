"""Triplet manifests (POPORO-style sets) and the Ray-free half of the PoporoIN builder.

A manifest is a CSV or Parquet table, one row per triplet:
  query, target, distractor      image paths (relative ones resolve against the manifest folder)
  relation_type                  CR (taxonomic) or TR (thematic) - the related target's axis
  distractor_type                CD (colour-matched) or SD (shape-matched) - the distractor's axis
  triplet_id                     optional, defaults to the row number
  query_label, target_label, distractor_label   optional class names (text baseline, reports)

PoporoIN (seed 000, Sec. 3.3) pairs ImageNet classes per annotation cell and then samples
validation images for the class triplets; ``plan_class_triplets`` does the pairing
deterministically, ``pick_images`` the image sampling.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from relate.probe.metrics import DISTRACTOR_TYPES, RELATION_TYPES, check_axis_labels

__all__ = [
    "TripletSet", "read_triplet_manifest", "write_triplet_manifest", "MANIFEST_COLUMNS",
    "read_pair_list", "plan_class_triplets", "pick_images", "list_class_images",
    "read_class_names", "IMAGE_SUFFIXES",
]

MANIFEST_COLUMNS = ("query", "target", "distractor", "relation_type", "distractor_type")
LABEL_COLUMNS = ("query_label", "target_label", "distractor_label")
IMAGE_SUFFIXES = (".jpeg", ".jpg", ".png", ".bmp", ".webp")


@dataclass
class TripletSet:
    """Parallel columns of a triplet set; paths are absolute after reading."""

    triplet_id: list[str]
    query: list[str]
    target: list[str]
    distractor: list[str]
    relation_type: np.ndarray
    distractor_type: np.ndarray
    labels: dict[str, list[str]] | None = None  # keys query/target/distractor

    def __len__(self) -> int:
        return len(self.triplet_id)

    def image_paths(self) -> list[str]:
        """Unique image paths in first-seen order."""
        return list(dict.fromkeys(self.query + self.target + self.distractor))

    def role_inputs(self, kind: str) -> dict[str, list[str]]:
        """Per role, what an extractor consumes: image paths, or class names for text models."""
        if kind == "image":
            return {"query": self.query, "target": self.target, "distractor": self.distractor}
        if self.labels is None:
            raise ValueError("this triplet set has no class labels (query_label, target_label, "
                             "distractor_label), which a text-encoder baseline needs")
        return dict(self.labels)


def _read_table(path: Path):
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    if path.suffix.lower() == ".parquet":
        return pq.read_table(path)
    if path.suffix.lower() in (".csv", ".tsv"):
        opts = pacsv.ParseOptions(delimiter="\t" if path.suffix.lower() == ".tsv" else ",")
        return pacsv.read_csv(path, parse_options=opts,
                              convert_options=pacsv.ConvertOptions(strings_can_be_null=False))
    raise ValueError(f"{path}: manifest must be .csv, .tsv or .parquet")


def read_triplet_manifest(path: str | Path, *, check_files: bool = True) -> TripletSet:
    """Parse and validate a manifest; every problem names the file, column and row."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"triplet manifest not found: {p}")
    table = _read_table(p)
    missing = [c for c in MANIFEST_COLUMNS if c not in table.column_names]
    if missing:
        raise ValueError(f"{p}: missing columns {missing}; a manifest needs {list(MANIFEST_COLUMNS)}")
    if table.num_rows == 0:
        raise ValueError(f"{p}: manifest has no rows")
    cols = {c: [None if v is None else str(v) for v in table.column(c).to_pylist()]
            for c in table.column_names}
    for c in MANIFEST_COLUMNS:
        empty = [i for i, v in enumerate(cols[c]) if not v]
        if empty:
            raise ValueError(f"{p}: column {c!r} is empty on rows {empty[:5]}")
    try:
        rel, dis = check_axis_labels([v.strip() for v in cols["relation_type"]],
                                     [v.strip() for v in cols["distractor_type"]])
    except ValueError as exc:
        raise ValueError(f"{p}: {exc}") from None
    ids = cols.get("triplet_id") or [str(i) for i in range(table.num_rows)]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{p}: triplet_id values are not unique")
    root = p.parent
    paths = {r: [str((root / v).resolve()) for v in cols[r]] for r in ("query", "target", "distractor")}
    if check_files:
        absent = [v for r in paths.values() for v in r if not Path(v).is_file()]
        if absent:
            raise FileNotFoundError(f"{p}: {len(absent)} image files not found, e.g. {absent[:3]}")
    labels = None
    present = [c for c in LABEL_COLUMNS if c in cols]
    if present:
        if len(present) != 3:
            raise ValueError(f"{p}: label columns must come together: found {present}, need {list(LABEL_COLUMNS)}")
        labels = {c.removesuffix("_label"): [v or "" for v in cols[c]] for c in LABEL_COLUMNS}
    return TripletSet(ids, paths["query"], paths["target"], paths["distractor"], rel, dis, labels)


def write_triplet_manifest(rows: Sequence[dict], path: str | Path) -> Path:
    """Write triplet rows (dicts with the manifest columns) as CSV or Parquet by suffix."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    if not rows:
        raise ValueError("no triplet rows to write")
    cols = ["triplet_id", *MANIFEST_COLUMNS] + [c for c in LABEL_COLUMNS if c in rows[0]]
    table = pa.table({c: [str(r[c]) for r in rows] for c in cols})
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.suffix.lower() == ".parquet":
        pq.write_table(table, out)
    elif out.suffix.lower() == ".csv":
        pacsv.write_csv(table, out)
    else:
        raise ValueError(f"{out}: manifest must end in .csv or .parquet")
    return out


def read_pair_list(path: str | Path) -> list[tuple[str, str]]:
    """Class pairs, one per line as 'a,b' or 'a<TAB>b'; '#' starts a comment."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"class-pair list not found: {p}")
    pairs = []
    for n, raw in enumerate(p.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = [x.strip() for x in line.replace("\t", ",").split(",")]
        if len(parts) != 2 or not all(parts) or parts[0] == parts[1]:
            raise ValueError(f"{p}:{n}: expected two different class names, got {raw!r}")
        pairs.append((parts[0], parts[1]))
    if not pairs:
        raise ValueError(f"{p}: no class pairs")
    return pairs


def plan_class_triplets(
    pairs: dict[str, list[tuple[str, str]]], n_triplets: int, seed: int, symmetric: bool = True,
) -> list[dict[str, str]]:
    """Class-level triplets, one quarter per (relation, distractor) cell, so each axis splits
    evenly as in PoporoIN (CR = TR, CD = SD). A related pair (q, t) from CR/TR joins a distractor
    pair (q, d) from CD/SD on the query class; the same planning always comes out of the same seed."""
    if n_triplets < 4 or n_triplets % 4:
        raise ValueError(f"n_triplets must be a positive multiple of 4, got {n_triplets}")
    missing = [k for k in (*RELATION_TYPES, *DISTRACTOR_TYPES) if not pairs.get(k)]
    if missing:
        raise ValueError(f"class-pair lists missing or empty for cells {missing}")
    by_query = {k: _index_pairs(pairs[k], symmetric) for k in (*RELATION_TYPES, *DISTRACTOR_TYPES)}
    rng = np.random.default_rng(seed)
    plan: list[dict[str, str]] = []
    for rel in RELATION_TYPES:
        for dis in DISTRACTOR_TYPES:
            cands = sorted((q, t, d) for q, targets in by_query[rel].items()
                           for t in targets for d in by_query[dis].get(q, ()) if d != t)
            if not cands:
                raise ValueError(f"no class triplet combines a {rel} pair and a {dis} pair on a shared query class")
            order = rng.permutation(len(cands))
            for j in range(n_triplets // 4):  # cycle when a cell has fewer class triplets
                q, t, d = cands[order[j % len(cands)]]
                plan.append({"triplet_id": f"{rel}{dis}-{j:05d}", "query_class": q, "target_class": t,
                             "distractor_class": d, "relation_type": rel, "distractor_type": dis})
    return plan


def _index_pairs(pairs: list[tuple[str, str]], symmetric: bool) -> dict[str, list[str]]:
    out: dict[str, set[str]] = {}
    for a, b in pairs:
        out.setdefault(a, set()).add(b)
        if symmetric:
            out.setdefault(b, set()).add(a)
    return {k: sorted(v) for k, v in out.items()}


def list_class_images(root: str | Path, cls: str) -> list[str]:
    """Sorted image files of one class folder (ImageNet-val layout: root/<class>/<image>)."""
    folder = Path(root) / cls
    if not folder.is_dir():
        raise FileNotFoundError(f"class folder not found: {folder}")
    files = sorted(str(f) for f in folder.iterdir() if f.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise ValueError(f"class folder has no images: {folder}")
    return files


def pick_images(row: dict[str, str], images: dict[str, list[str]], seed: int) -> dict[str, str]:
    """Choose one image per role; the choice depends only on (seed, triplet_id), never on
    which worker or in what order rows are processed."""
    rng = np.random.default_rng([seed, zlib.crc32(row["triplet_id"].encode())])
    out = {}
    for role in ("query", "target", "distractor"):
        files = images[row[f"{role}_class"]]
        out[role] = files[int(rng.integers(0, len(files)))]
    return out


def read_class_names(path: str | Path) -> dict[str, str]:
    """Folder name -> readable class name from 'wnid name, synonyms' lines (LOC_synset_mapping)."""
    names = {}
    for raw in Path(path).read_text().splitlines():
        if raw.strip():
            key, _, rest = raw.strip().partition(" ")
            names[key] = rest.split(",")[0].strip() or key
    return names
