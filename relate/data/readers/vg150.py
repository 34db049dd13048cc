"""VG150 and IndoorVG in the Scene-Graph-Benchmark layout: one h5 file + a dicts json + an
image_data json.

The h5 stores every split in one set of arrays: per image ``split`` (0 train, 2 test),
``img_to_first_box`` / ``img_to_last_box`` and ``img_to_first_rel`` / ``img_to_last_rel``
(inclusive ranges, -1 for none); per box ``labels`` (1-based into ``idx_to_label``) and
``boxes_<scale>`` as (centre x, centre y, width, height) in a frame whose longer image side is
``scale`` pixels; per relation ``relationships`` (global box indices) and ``predicates`` (1-based
into ``idx_to_predicate``). ``image_data.json`` carries the true width and height, which undo the
box scale.

What Scene-Graph-Benchmark's own loader (maskrcnn_benchmark/data/datasets/visual_genome.py) does
on the real files, and this reader with it:

- ``image_data.json`` lists four Visual Genome images (ids 1592, 1722, 4616, 4617) that the h5
  does not hold; they are skipped before the two are aligned row by row (108,077 entries against
  108,073 h5 rows on the published files). Any other count mismatch is an error.
- Images without boxes never load; with ``filter_empty_rels`` neither do images without relations.
- There is no validation code in the h5: the validation split is the first ``num_val_im`` (5,000)
  of the remaining training images and the train split is the rest. Rows coded 1 are never read
  (counted in ``notes``).
- Relations whose subject and object are the same box are kept there; the project schema refuses a
  self-loop, so they are dropped here and counted in ``notes``, as are images left with none.

Boxes, by default: corners in float from the centre format, scaled to the image, clipped to
[0, width] x [0, height], and a box narrower than a pixel widened to one. ``protocol="sgb"``
instead yields the ground truth Scene-Graph-Benchmark's evaluation scores, row for row:

- corners computed in the h5's own dtype: x1 = cx - w / 2 written into the integer array truncates
  toward zero, and x2 = that x1 + w in integers (so a box of odd width moves by up to a pixel);
- scaled by dividing by ``box_scale`` and multiplying by the longer image side, held as float32,
  clipped to [0, width - 1] x [0, height - 1] (its last pixel, not the image border); a box that
  starts on the last column ends flat there, and nothing is widened;
- self relations kept (they count in recall's denominator and no ordered pair can find them), and
  so are images whose only relations are self relations;
- a file with a negative centre or a size of 0 is refused, as that loader refuses it;
- ``num_val_im`` of 0 or less takes no val images out of train (val is then the whole train split).

``BenchmarkData.loader_rows`` counts, from the h5's index ranges, the images, boxes and relation
rows that loader keeps for the split, under either protocol; ``BenchmarkData.gt_rows()`` sets them
beside the rows read (equal under ``sgb``).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np

from relate.data.readers.base import (READERS, BenchmarkData, _clip_box, build_tables, make_box,
                                      require_images)

__all__ = ["SPLIT_CODES", "CORRUPTED_VG_IMAGES", "SGB_NUM_VAL_IM", "READER_PROTOCOLS", "read_vg_h5", "read_vg150",
           "read_indoorvg"]

SPLIT_CODES = {"train": 0, "val": 0, "test": 2}
CORRUPTED_VG_IMAGES = frozenset({"1592", "1722", "4616", "4617"})
SGB_NUM_VAL_IM = 5000
READER_PROTOCOLS = ("paper", "sgb")  # the recall protocols (relate.metrics.sgb.PROTOCOLS) as loading rules


def _load(root: Path, h5_name: str, dicts_name: str, image_data_name: str):
    import h5py  # optional dependency: only this reader needs it

    missing = [n for n in (h5_name, dicts_name, image_data_name) if not (root / n).is_file()]
    if missing:
        raise FileNotFoundError(f"{root}: missing the Scene-Graph-Benchmark file(s) {missing}")
    dicts = json.loads((root / dicts_name).read_text())
    image_data = json.loads((root / image_data_name).read_text())
    h5 = h5py.File(root / h5_name, "r")
    return h5, dicts, image_data


def align_image_data(image_data: list[dict], n_h5: int, where: Path) -> tuple[list[dict], int]:
    """Drop the four corrupted images Scene-Graph-Benchmark skips, then require one entry per h5 row."""
    if len(image_data) == n_h5:
        return image_data, 0
    kept = [m for m in image_data if str(m["image_id"]) not in CORRUPTED_VG_IMAGES]
    if len(kept) != n_h5:
        raise ValueError(f"{where} has {len(image_data)} entries ({len(image_data) - len(kept)} of them the "
                         f"corrupted VG images {sorted(CORRUPTED_VG_IMAGES)}), leaving {len(kept)} against the "
                         f"h5's {n_h5} images; they must align row by row")
    return kept, len(image_data) - len(kept)


def _split_rows(split_arr: np.ndarray, fb: np.ndarray, fr: np.ndarray, split: str, filter_empty_rels: bool,
                num_val_im: int, sgb: bool = False) -> np.ndarray:
    """Row indices of ``split`` as Scene-Graph-Benchmark selects them (val carved from train)."""
    mask = (split_arr == SPLIT_CODES[split]) & (fb >= 0)
    if filter_empty_rels:
        mask &= fr >= 0
    rows = np.flatnonzero(mask)
    if sgb and num_val_im <= 0:  # that loader carves only for a positive count
        return rows
    if split == "val":
        return rows[:max(num_val_im, 0)]
    if split == "train":
        return rows[max(num_val_im, 0):]
    return rows


def _sgb_corners(raw: np.ndarray, where: Path) -> np.ndarray:
    """(x1, y1, x2, y2) from the h5's (cx, cy, w, h) with Scene-Graph-Benchmark's arithmetic: the
    corner goes back into an array of the file's dtype, so an integer file truncates it toward
    zero, and the far corner is that truncated corner plus the size, still in integers."""
    bad = np.flatnonzero((raw[:, :2] < 0).any(axis=1) | (raw[:, 2:] <= 0).any(axis=1))
    if bad.size:
        raise ValueError(f"{where}: {bad.size} box(es) with a negative centre or a size of 0 (first: row "
                         f"{int(bad[0])} = {raw[bad[0]].tolist()}); Scene-Graph-Benchmark's loader refuses such a file")
    centre, size = raw[:, :2], raw[:, 2:]
    near = (centre - size / 2).astype(raw.dtype)
    return np.concatenate([near, near + size], axis=1)


def _sgb_boxes(corners: np.ndarray, w: int, h: int, box_scale: int) -> np.ndarray:
    """One image's boxes as that evaluation holds its ground truth: scaled back to the image (divide
    by the frame, times the longer side), float32, clipped to the last pixel row and column."""
    b = (corners / box_scale * max(w, h)).astype(np.float32)
    b[:, 0::2] = np.clip(b[:, 0::2], 0, w - 1)
    b[:, 1::2] = np.clip(b[:, 1::2], 0, h - 1)
    return b


def _paper_boxes(xyxy: np.ndarray, w: float, h: float, box_scale: int) -> np.ndarray:
    """One image's boxes under the project's conventions: float corners scaled to the image,
    clipped to its border, and never under a pixel wide or high (the schema refuses empty boxes)."""
    b = _clip_box(xyxy * (max(w, h) / box_scale), w, h)
    b[:, 2] = np.maximum(b[:, 2], np.minimum(b[:, 0] + 1, w))
    b[:, 0] = np.minimum(b[:, 0], b[:, 2] - 1)
    b[:, 3] = np.maximum(b[:, 3], np.minimum(b[:, 1] + 1, h))
    b[:, 1] = np.minimum(b[:, 1], b[:, 3] - 1)
    return b


def read_vg_h5(path: str | Path, *, source: str = "vg150", split: str = "test", box_scale: int = 1024,
               h5_name: str = "VG-SGG-with-attri.h5", dicts_name: str = "VG-SGG-dicts-with-attri.json",
               image_data_name: str = "image_data.json", image_dir: str = "images",
               filter_empty_rels: bool = True, num_val_im: int = SGB_NUM_VAL_IM,
               protocol: str = "paper") -> BenchmarkData:
    """Read one split of a Scene-Graph-Benchmark style dataset into the project schema; ``protocol``
    "sgb" keeps that benchmark's own boxes and rows (see the module docstring)."""
    if split not in SPLIT_CODES:
        raise ValueError(f"split must be one of {list(SPLIT_CODES)}, got {split!r}")
    if protocol not in READER_PROTOCOLS:
        raise ValueError(f"protocol must be one of {list(READER_PROTOCOLS)}, got {protocol!r}")
    sgb = protocol == "sgb"
    root = Path(path)
    h5, dicts, image_data = _load(root, h5_name, dicts_name, image_data_name)
    with h5:
        key = f"boxes_{box_scale}"
        if key not in h5:
            raise KeyError(f"{root / h5_name}: no {key!r}; have {[k for k in h5 if k.startswith('boxes_')]}")
        split_arr = h5["split"][:]
        fb, lb = h5["img_to_first_box"][:], h5["img_to_last_box"][:]
        fr, lr = h5["img_to_first_rel"][:], h5["img_to_last_rel"][:]
        labels = h5["labels"][:].reshape(-1)
        raw_boxes = h5[key][:]
        rels = h5["relationships"][:]
        preds = h5["predicates"][:].reshape(-1)
    image_data, n_corrupt = align_image_data(image_data, split_arr.size, root / image_data_name)
    notes: Counter = Counter()
    if n_corrupt:
        notes["image_data rows skipped: corrupted VG images (as Scene-Graph-Benchmark)"] = n_corrupt
    if (split_arr == 1).any():
        notes["h5 rows coded split 1 (never read by Scene-Graph-Benchmark)"] = int((split_arr == 1).sum())
    idx_to_label = {int(k): v for k, v in dicts["idx_to_label"].items()}
    idx_to_pred = {int(k): v for k, v in dicts["idx_to_predicate"].items()}
    if sgb:
        xyxy = _sgb_corners(raw_boxes, root / h5_name)
    else:
        boxes = raw_boxes.astype(np.float64)
        xyxy = np.concatenate([boxes[:, :2] - boxes[:, 2:] / 2, boxes[:, :2] + boxes[:, 2:] / 2], axis=1)
    selected = _split_rows(split_arr, fb, fr, split, filter_empty_rels, num_val_im, sgb)
    loader_rows = {"images": int(selected.size), "boxes": int((lb[selected] - fb[selected] + 1).sum()),
                   "relations": int(np.where(fr[selected] >= 0, lr[selected] - fr[selected] + 1, 0).sum())}
    rows = []
    for i in selected:
        meta = image_data[i]
        w, h = int(meta["width"]), int(meta["height"])
        b = (_sgb_boxes(xyxy[fb[i]:lb[i] + 1], w, h, box_scale) if sgb
             else _paper_boxes(xyxy[fb[i]:lb[i] + 1], float(w), float(h), box_scale))
        cats = [idx_to_label[int(l)] for l in labels[fb[i]:lb[i] + 1]]
        r = []
        if fr[i] >= 0:
            for (s, o), p in zip(rels[fr[i]:lr[i] + 1], preds[fr[i]:lr[i] + 1]):
                if s == o and not sgb:
                    notes["self relations dropped (subject == object box; kept by Scene-Graph-Benchmark)"] += 1
                    continue
                r.append({"subject": int(s - fb[i]), "object": int(o - fb[i]), "predicate": idx_to_pred[int(p)],
                          "pass": "human", "gate": "kept", "score": None})
        if filter_empty_rels and not r:
            notes["images dropped: every relation a self relation (kept by Scene-Graph-Benchmark)"] += 1
            continue
        iid = str(meta["image_id"])
        rows.append({"image_id": iid, "uri": str(root / image_dir / f"{iid}.jpg"), "width": w, "height": h,
                     "source": source, "split": split, "boxes": [make_box(*bb, c) for bb, c in zip(b, cats)],
                     "relations": r})
    codes = {v: k for k, v in SPLIT_CODES.items() if k != "val"}
    require_images(rows, name=source, where=root / h5_name, split=split,
                   present=[codes.get(int(c), f"code {int(c)}") for c in np.unique(split_arr)])
    corpus, _ = build_tables(source, rows, allow_self_loops=sgb, allow_flat_boxes=sgb)
    vocab = tuple(idx_to_pred[k] for k in sorted(idx_to_pred))
    return BenchmarkData(source, corpus, None, vocab, notes=dict(notes), loader_rows=loader_rows)


@READERS.register("vg150")
def read_vg150(path: str | Path, **kwargs) -> BenchmarkData:
    """VG150 (Xu et al. 2017 split) as distributed with Scene-Graph-Benchmark.pytorch."""
    return read_vg_h5(path, source="vg150", **kwargs)


@READERS.register("indoorvg")
def read_indoorvg(path: str | Path, **kwargs) -> BenchmarkData:
    """IndoorVG: indoor Visual Genome images, shipped in the same h5 + dicts layout."""
    kwargs.setdefault("h5_name", "IndoorVG.h5")
    kwargs.setdefault("dicts_name", "IndoorVG-dicts.json")
    return read_vg_h5(path, source="indoorvg", **kwargs)
