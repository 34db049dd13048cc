"""SpatialSense (Yang et al. 2019): ``annotations.json``, a list of images with ``url``,
``width``, ``height``, ``split`` (train / valid / test) and ``annotations``: each a subject and an
object (``name`` and ``bbox`` in SpatialSense's own order, [y1, y2, x1, x2]), a ``predicate`` and
a true/false ``label``. The false triples were written to defeat priors and the test split is
balanced, so every triple becomes a labelled cell (A6); the true ones are also relations.

The pixels are not fetched from ``url``: the dataset's images archive unpacks to
``images/flickr/`` (images whose url is a Flickr http address) and ``images/nyu/`` (the NYU
images, whose url is a relative path), each file under the last component of its url, which is
where SpatialSense's own loader reads them. A triple whose subject and object are the same box is
dropped and counted in ``notes`` (the project schema refuses self-loops)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from relate.data.readers.base import READERS, BenchmarkData, build_tables, make_box, require_images

__all__ = ["read_spatialsense", "image_path", "SPATIALSENSE_PREDICATES"]

SPATIALSENSE_PREDICATES = ("above", "behind", "in", "in front of", "next to", "on", "to the left of",
                           "to the right of", "under")


def image_path(root: Path, url: str, image_dir: str = "images") -> Path:
    """Where the released archive puts the image of ``url``: Flickr addresses under ``flickr/``,
    everything else (the NYU images) under ``nyu/``, by the url's last component."""
    sub = "flickr" if url.startswith("http") else "nyu"
    return root / image_dir / sub / url.rstrip("/").split("/")[-1]


@READERS.register("spatialsense")
def read_spatialsense(path: str | Path, *, split: str = "test", json_name: str = "annotations.json",
                      image_dir: str = "images") -> BenchmarkData:
    root = Path(path)
    f = root / json_name if root.is_dir() else root
    root = f.parent
    if not f.is_file():
        raise FileNotFoundError(f"{f}: SpatialSense annotations not found")
    notes: Counter = Counter()
    rows, present, seen = [], set(), {}
    for k, d in enumerate(json.loads(f.read_text())):
        present.add(d["split"])
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
                notes["triples dropped: subject and object the same box"] += 1
                continue
            label = bool(a["label"])
            cells.append({"subject": s, "object": o, "predicate": a["predicate"], "label": label})
            if label:
                rels.append({"subject": s, "object": o, "predicate": a["predicate"], "pass": "human",
                             "gate": "kept", "score": None})
        if not cells:
            continue
        iid = Path(d["url"]).stem or f"spatialsense_{k}"
        if iid in seen:
            raise ValueError(f"{f}: entries {seen[iid]} and {k} both resolve to image id {iid!r}")
        seen[iid] = k
        rows.append({"image_id": iid, "uri": str(image_path(root, d["url"], image_dir)), "width": w, "height": h,
                     "source": "spatialsense", "split": split, "boxes": boxes, "relations": rels, "cells": cells})
    require_images(rows, name="spatialsense", where=f, split=split, present=present)
    corpus, cells_t = build_tables("spatialsense", rows)
    # the real file uses SPATIALSENSE_PREDICATES; the vocabulary is what the file holds
    vocab = tuple(sorted({c["predicate"] for r in rows for c in r["cells"]}))
    return BenchmarkData("spatialsense", corpus, cells_t, vocab, notes=dict(notes))
