"""HICO-DET in the json layout shared by the PPDM / CDN / GEN-VLKT code bases.

``annotations/trainval_hico.json`` and ``annotations/test_hico.json`` are lists of images with
``file_name``, ``annotations`` (``bbox`` as absolute x1 y1 x2 y2, ``category_id`` an object id)
and ``hoi_annotation`` (``subject_id`` / ``object_id`` index the image's annotations,
``category_id`` is the 1-based verb id). Verb names come from HICO's ``hico_list_vb.txt`` (lines
``<id> <name>``) and object names from a COCO-style ``categories`` json.

The layout stores no image size. It is read from ``image_sizes.json`` (``{file_name: [width,
height]}``) when present, else from the ``size`` field of the original release's
``anno_bbox.mat`` (``bbox_train`` / ``bbox_test``) when that file is in the folder, else from the
image header under ``images/<split dir>/`` (PIL reads only the header). A size is never guessed
from the extent of the boxes: an image whose size cannot be found is an error that names every
such file.

``no_interaction`` pairs are not relations. Every image of the annotation file is read, as
HICO-DET's own evaluation scores every test image (QPIC's ``datasets/hico.py`` keeps all of them
for testing, and its ``hico_eval.py`` turns each detection in an image without the matching GT
pair into a false positive). An image whose pairs are all ``no_interaction`` (or that has no pair)
enters the corpus with its boxes and no relation, so recall, which averages over images with a GT
relation, leaves it out of its denominators, while anything that counts false positives or reads
negatives still sees it (counted in ``notes``). With ``cells=True`` each ``no_interaction`` pair
becomes a labelled negative for every verb, and annotated verbs become positives: the federated
cells of A2, in relation images and in images without one alike.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np

from relate.data.readers.base import READERS, BenchmarkData, _clip_box, build_tables, make_box, require_images

__all__ = ["read_hico_det", "read_name_list", "image_sizes", "sizes_from_anno_bbox", "NO_INTERACTION"]

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


def sizes_from_anno_bbox(mat_path: Path) -> dict[str, tuple[int, int]]:
    """(width, height) per file name from the ``size`` structs of HICO-DET's ``anno_bbox.mat``."""
    from scipy.io import loadmat

    mat = loadmat(mat_path, squeeze_me=True, struct_as_record=False)
    out = {}
    for key in ("bbox_train", "bbox_test"):
        for entry in np.atleast_1d(mat.get(key, [])):
            out[str(entry.filename)] = (int(entry.size.width), int(entry.size.height))
    if not out:
        raise ValueError(f"{mat_path}: no bbox_train / bbox_test entries with a size")
    return out


def image_sizes(file_names: list[str], img_dir: Path, sizes_file: Path | None,
                anno_bbox: Path | None = None) -> dict[str, tuple[int, int]]:
    """True (width, height) per file name from ``sizes_file``, ``anno_bbox`` or the image header;
    every file whose size cannot be found is named in one FileNotFoundError."""
    known: dict[str, tuple[int, int]] = {}
    if sizes_file is not None and sizes_file.is_file():
        known = {k: (int(v[0]), int(v[1])) for k, v in json.loads(sizes_file.read_text()).items()}
    elif anno_bbox is not None and anno_bbox.is_file():
        known = sizes_from_anno_bbox(anno_bbox)
    out, missing = {}, []
    for fn in file_names:
        if fn in known:
            out[fn] = known[fn]
        elif (img_dir / fn).is_file():
            from PIL import Image

            with Image.open(img_dir / fn) as im:
                out[fn] = (im.width, im.height)
        else:
            missing.append(fn)
    if missing:
        raise FileNotFoundError(
            f"HICO-DET: no size for {len(missing)} image(s) (not under {img_dir}, nor in {sizes_file} or "
            f"{anno_bbox}); the json layout stores none and box extents are not a size: {missing}")
    return out


@READERS.register("hico_det")
def read_hico_det(path: str | Path, *, split: str = "test", verb_list: str = "hico_list_vb.txt",
                  object_categories: str = "coco_categories.json", cells: bool = False,
                  sizes: str = "image_sizes.json") -> BenchmarkData:
    """Read HICO-DET; verbs are the predicates (``no_interaction`` excluded from relations)."""
    if split not in _FILES:
        raise ValueError(f"split must be one of {list(_FILES)}, got {split!r}")
    root = Path(path)
    ann_name, img_dir = _FILES[split]
    ann = root / "annotations" / ann_name
    missing = [str(p) for p in (ann, root / verb_list, root / object_categories) if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"HICO-DET: missing {missing}")
    verbs = read_name_list(root / verb_list)
    objects = {int(c["id"]): c["name"] for c in json.loads((root / object_categories).read_text())}
    notes: Counter = Counter()
    kept = []
    for d in json.loads(ann.read_text()):
        rels, cs, n_pairs = [], [], 0
        for hoi in d.get("hoi_annotation", []):
            s, o, v = int(hoi["subject_id"]), int(hoi["object_id"]), verbs[int(hoi["category_id"])]
            if s == o or o < 0:
                notes["pairs dropped: no object or subject == object"] += 1
                continue
            n_pairs += 1
            if v == NO_INTERACTION:
                cs += [{"subject": s, "object": o, "predicate": name, "label": False}
                       for name in verbs.values() if name != NO_INTERACTION]
                continue
            rels.append({"subject": s, "object": o, "predicate": v, "pass": "human", "gate": "kept", "score": None})
            cs.append({"subject": s, "object": o, "predicate": v, "label": True})
        if not rels:  # kept: recall skips it by itself, negatives and false positives still need it
            notes["images without a relation, kept (every pair no_interaction; recall skips them)" if n_pairs
                  else "images without a relation, kept (no pair annotated; recall skips them)"] += 1
        kept.append((d, rels, cs))
    require_images(kept, name="hico_det", where=ann, split=split)
    size = image_sizes([d["file_name"] for d, _, _ in kept], root / "images" / img_dir, root / sizes,
                       root / "anno_bbox.mat")
    rows = []
    for d, rels, cs in kept:
        w, h = size[d["file_name"]]
        b = _clip_box(np.asarray([a["bbox"] for a in d["annotations"]], dtype=float).reshape(-1, 4), w, h)
        row = {"image_id": Path(d["file_name"]).stem, "uri": str(root / "images" / img_dir / d["file_name"]),
               "width": w, "height": h, "source": "hico_det", "split": split,
               "boxes": [make_box(*bb, objects[int(a["category_id"])]) for bb, a in zip(b, d["annotations"])],
               "relations": rels}
        if cells:
            row["cells"] = cs
        rows.append(row)
    corpus, cell_table = build_tables("hico_det", rows)
    vocab = tuple(verbs[k] for k in sorted(verbs) if verbs[k] != NO_INTERACTION)
    return BenchmarkData("hico_det", corpus, cell_table, vocab, notes=dict(notes))
