"""SpatialSense (Yang et al. 2019): ``annotations.json``, a list of images with ``url``,
``width``, ``height``, ``split`` (train / valid / test) and ``annotations``: each a subject and an
object (``name`` and ``bbox`` in SpatialSense's own order, [y1, y2, x1, x2]), a ``predicate`` and
a true/false ``label``. The false triples were written to defeat priors and the test split is
balanced, so every triple becomes a labelled cell (A6); the true ones are also relations."""

from __future__ import annotations

import json
from pathlib import Path

from relate.data.readers.base import READERS, BenchmarkData, build_tables, make_box

__all__ = ["read_spatialsense", "SPATIALSENSE_PREDICATES"]

SPATIALSENSE_PREDICATES = ("above", "behind", "in", "in front of", "next to", "on", "to the left of",
                           "to the right of", "under")


@READERS.register("spatialsense")
def read_spatialsense(path: str | Path, *, split: str = "test", json_name: str = "annotations.json") -> BenchmarkData:
    root = Path(path)
    f = root / json_name if root.is_dir() else root
    if not f.is_file():
        raise FileNotFoundError(f"{f}: SpatialSense annotations not found")
    rows = []
    for k, d in enumerate(json.loads(f.read_text())):
        if d["split"] != split:
            continue
        w, h = int(d["width"]), int(d["height"])
        index: dict[tuple, int] = {}
        boxes, rels, cells = [], [], []

        def box_id(ent: dict) -> int:
            y1, y2, x1, x2 = (float(v) for v in ent["bbox"])
            key = (ent["name"], x1, y1, x2, y2)
            if key not in index:
                index[key] = len(boxes)
                boxes.append(make_box(max(x1, 0), max(y1, 0), min(x2, w), min(y2, h), ent["name"]))
            return index[key]

        for a in d["annotations"]:
            s, o = box_id(a["subject"]), box_id(a["object"])
            if s == o:
                continue
            label = bool(a["label"])
            cells.append({"subject": s, "object": o, "predicate": a["predicate"], "label": label})
            if label:
                rels.append({"subject": s, "object": o, "predicate": a["predicate"], "pass": "human",
                             "gate": "kept", "score": None})
        if not cells:
            continue
        iid = Path(d["url"]).stem or f"spatialsense_{k}"
        rows.append({"image_id": iid, "uri": _resolve(root, d["url"]), "width": w, "height": h, "source": "spatialsense",
                     "split": split, "boxes": boxes, "relations": rels, "cells": cells})
    corpus, cells_t = build_tables("spatialsense", rows)
    # the real file uses SPATIALSENSE_PREDICATES; the vocabulary is what the file holds
    vocab = tuple(sorted({c["predicate"] for r in rows for c in r["cells"]}))
    return BenchmarkData("spatialsense", corpus, cells_t, vocab)


def _resolve(root: Path, url: str) -> str:
    """Relative image paths are relative to the dataset folder; URLs and absolute paths pass through."""
    return url if "://" in url or Path(url).is_absolute() else str(root / url)
