"""VG150 and IndoorVG in the Scene-Graph-Benchmark layout: one h5 file + a dicts json + an
image_data json.

The h5 stores every split in one set of arrays: per image ``split`` (0 train, 1 val, 2 test),
``img_to_first_box`` / ``img_to_last_box`` and ``img_to_first_rel`` / ``img_to_last_rel``
(inclusive ranges, -1 for none); per box ``labels`` (1-based into ``idx_to_label``) and
``boxes_<scale>`` as (centre x, centre y, width, height) in a frame whose longer image side is
``scale`` pixels; per relation ``relationships`` (global box indices) and ``predicates`` (1-based
into ``idx_to_predicate``). ``image_data.json`` is row-aligned with the h5 images and carries the
true width and height, which undo the box scale.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from relate.data.readers.base import READERS, BenchmarkData, _clip_box, build_tables, make_box

__all__ = ["SPLIT_CODES", "read_vg_h5", "read_vg150", "read_indoorvg"]

SPLIT_CODES = {"train": 0, "val": 1, "test": 2}


def _load(root: Path, h5_name: str, dicts_name: str, image_data_name: str):
    import h5py  # optional dependency: only this reader needs it

    for n in (h5_name, dicts_name, image_data_name):
        if not (root / n).is_file():
            raise FileNotFoundError(f"{root}: expected the Scene-Graph-Benchmark file {n!r}")
    dicts = json.loads((root / dicts_name).read_text())
    image_data = json.loads((root / image_data_name).read_text())
    h5 = h5py.File(root / h5_name, "r")
    return h5, dicts, image_data


def read_vg_h5(path: str | Path, *, source: str = "vg150", split: str = "test", box_scale: int = 1024,
               h5_name: str = "VG-SGG-with-attri.h5", dicts_name: str = "VG-SGG-dicts-with-attri.json",
               image_data_name: str = "image_data.json", image_dir: str = "images",
               filter_empty_rels: bool = True) -> BenchmarkData:
    """Read one split of a Scene-Graph-Benchmark style dataset into the project schema."""
    if split not in SPLIT_CODES:
        raise ValueError(f"split must be one of {list(SPLIT_CODES)}, got {split!r}")
    root = Path(path)
    h5, dicts, image_data = _load(root, h5_name, dicts_name, image_data_name)
    with h5:
        key = f"boxes_{box_scale}"
        if key not in h5:
            raise KeyError(f"{root / h5_name}: no {key!r}; have {[k for k in h5 if k.startswith('boxes_')]}")
        split_arr = h5["split"][:]
        if len(image_data) != split_arr.size:
            raise ValueError(f"{root / image_data_name} has {len(image_data)} entries but the h5 has "
                             f"{split_arr.size} images; they must be row-aligned")
        fb, lb = h5["img_to_first_box"][:], h5["img_to_last_box"][:]
        fr, lr = h5["img_to_first_rel"][:], h5["img_to_last_rel"][:]
        labels = h5["labels"][:].reshape(-1)
        boxes = h5[key][:].astype(np.float64)
        rels = h5["relationships"][:]
        preds = h5["predicates"][:].reshape(-1)
    idx_to_label = {int(k): v for k, v in dicts["idx_to_label"].items()}
    idx_to_pred = {int(k): v for k, v in dicts["idx_to_predicate"].items()}
    xyxy = np.concatenate([boxes[:, :2] - boxes[:, 2:] / 2, boxes[:, :2] + boxes[:, 2:] / 2], axis=1)
    rows = []
    for i in np.flatnonzero(split_arr == SPLIT_CODES[split]):
        meta = image_data[i]
        w, h = float(meta["width"]), float(meta["height"])
        if fb[i] < 0:
            continue
        b = _clip_box(xyxy[fb[i]:lb[i] + 1] * (max(w, h) / box_scale), w, h)
        b[:, 2] = np.maximum(b[:, 2], np.minimum(b[:, 0] + 1, w))  # degenerate boxes get 1 px
        b[:, 0] = np.minimum(b[:, 0], b[:, 2] - 1)
        b[:, 3] = np.maximum(b[:, 3], np.minimum(b[:, 1] + 1, h))
        b[:, 1] = np.minimum(b[:, 1], b[:, 3] - 1)
        cats = [idx_to_label[int(l)] for l in labels[fb[i]:lb[i] + 1]]
        r = []
        if fr[i] >= 0:
            for (s, o), p in zip(rels[fr[i]:lr[i] + 1], preds[fr[i]:lr[i] + 1]):
                if s != o:
                    r.append({"subject": int(s - fb[i]), "object": int(o - fb[i]), "predicate": idx_to_pred[int(p)],
                              "pass": "human", "gate": "kept", "score": None})
        if filter_empty_rels and not r:
            continue
        iid = str(meta["image_id"])
        rows.append({"image_id": iid, "uri": str(root / image_dir / f"{iid}.jpg"), "width": int(w), "height": int(h),
                     "source": source, "split": split, "boxes": [make_box(*bb, c) for bb, c in zip(b, cats)],
                     "relations": r})
    corpus, _ = build_tables(source, rows)
    vocab = tuple(idx_to_pred[k] for k in sorted(idx_to_pred))
    return BenchmarkData(source, corpus, None, vocab)


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
