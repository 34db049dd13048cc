"""HICO-DET in the json layout shared by the PPDM / CDN / GEN-VLKT code bases.

``annotations/trainval_hico.json`` and ``annotations/test_hico.json`` are lists of images with
``file_name``, ``annotations`` (``bbox`` as absolute x1 y1 x2 y2, ``category_id`` an object id)
and ``hoi_annotation`` (``subject_id`` / ``object_id`` index the image's annotations,
``category_id`` is the 1-based verb id). Verb names come from HICO's ``hico_list_vb.txt`` (lines
``<id> <name>``) and object names from a COCO-style ``categories`` json. The layout stores no
image size, so it is read from the image header under ``images/<split dir>/`` (PIL reads only
the header); without the image, the extent of the boxes is used and flagged in ``uri``.

``no_interaction`` pairs are not relations. With ``cells=True`` each such pair becomes a labelled
negative for every verb, and annotated verbs become positives: the federated cells of A2.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from relate.data.readers.base import READERS, BenchmarkData, _clip_box, build_tables, make_box

__all__ = ["read_hico_det", "read_name_list"]

_FILES = {"train": ("trainval_hico.json", "train2015"), "test": ("test_hico.json", "test2015")}
NO_INTERACTION = "no_interaction"


def read_name_list(path: Path) -> dict[int, str]:
    """``<id> <name>`` lines (HICO's list files); header and separator lines are skipped."""
    out = {}
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].isdigit():
            out[int(parts[0])] = " ".join(parts[1:])
    if not out:
        raise ValueError(f"{path}: no '<id> <name>' lines found")
    return out


def _size(img_path: Path, boxes: list[list[float]]) -> tuple[int, int, bool]:
    if img_path.is_file():
        from PIL import Image

        with Image.open(img_path) as im:
            return im.width, im.height, True
    w = max([b[2] for b in boxes] + [1.0])
    h = max([b[3] for b in boxes] + [1.0])
    return int(math.ceil(w)), int(math.ceil(h)), False


@READERS.register("hico_det")
def read_hico_det(path: str | Path, *, split: str = "test", verb_list: str = "hico_list_vb.txt",
                  object_categories: str = "coco_categories.json", cells: bool = False) -> BenchmarkData:
    """Read HICO-DET; verbs are the predicates (``no_interaction`` excluded from relations)."""
    if split not in _FILES:
        raise ValueError(f"split must be one of {list(_FILES)}, got {split!r}")
    root = Path(path)
    ann_name, img_dir = _FILES[split]
    ann = root / "annotations" / ann_name
    for p in (ann, root / verb_list, root / object_categories):
        if not p.is_file():
            raise FileNotFoundError(f"HICO-DET: expected {p}")
    verbs = read_name_list(root / verb_list)
    objects = {int(c["id"]): c["name"] for c in json.loads((root / object_categories).read_text())}
    rows = []
    for d in json.loads(ann.read_text()):
        boxes = [a["bbox"] for a in d["annotations"]]
        w, h, real = _size(root / "images" / img_dir / d["file_name"], boxes)
        b = _clip_box(np.asarray(boxes, dtype=float).reshape(-1, 4), w, h)
        rels, cs = [], []
        for hoi in d.get("hoi_annotation", []):
            s, o, v = int(hoi["subject_id"]), int(hoi["object_id"]), verbs[int(hoi["category_id"])]
            if s == o or o < 0:
                continue
            if v == NO_INTERACTION:
                cs += [{"subject": s, "object": o, "predicate": name, "label": False}
                       for name in verbs.values() if name != NO_INTERACTION]
                continue
            rels.append({"subject": s, "object": o, "predicate": v, "pass": "human", "gate": "kept", "score": None})
            cs.append({"subject": s, "object": o, "predicate": v, "label": True})
        iid = Path(d["file_name"]).stem
        row = {"image_id": iid, "uri": str(root / "images" / img_dir / d["file_name"]) + ("" if real else "#size-from-boxes"),
               "width": w, "height": h, "source": "hico_det", "split": split,
               "boxes": [make_box(*bb, objects[int(a["category_id"])]) for bb, a in zip(b, d["annotations"])],
               "relations": rels}
        if cells:
            row["cells"] = cs
        if rels or cs:
            rows.append(row)
    corpus, cell_table = build_tables("hico_det", rows)
    vocab = tuple(verbs[k] for k in sorted(verbs) if verbs[k] != NO_INTERACTION)
    return BenchmarkData("hico_det", corpus, cell_table, vocab)
