"""PSG (psg.json + COCO panoptic PNGs) and Haystack (the same layout with explicit negatives).

psg.json holds ``thing_classes``, ``stuff_classes`` and ``predicate_classes`` (0-based), the
``test_image_ids`` list, and per image ``data`` entries with ``file_name``, ``height``, ``width``,
``image_id``, ``pan_seg_file_name``, ``segments_info`` (one per object, COCO panoptic), the
row-aligned ``annotations`` (``bbox`` as absolute x1 y1 x2 y2, ``category_id`` into things +
stuff) and ``relations`` as [subject, object, predicate] triples. Boxes come from the annotations
by default or, with ``boxes_from="segments"``, from the panoptic PNG itself (segment id = R +
256 G + 256^2 B, COCO's encoding). As in OpenPSG's dataset, an image without relations is not
loaded and the train split is every image outside ``test_image_ids``.

Haystack (``annotation_v1.json``) reuses PSG's predicates and layout; each entry adds
``neg_relations``: cells an annotator inspected and marked false. Positives and negatives become
labelled cells (A2); an image that carries only negatives is kept, since its negatives are scored.
Haystack is an evaluation set: without ``test_image_ids`` every image is a test image. Its own
scorer skips a triple whose predicate is -1 (unusable); so does this reader, counting them, where
Python indexing would silently read the last predicate instead.

Relations whose subject and object are the same segment are dropped and counted in ``notes``
(the project schema refuses self-loops).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np

from relate.data.readers.base import READERS, BenchmarkData, _clip_box, build_tables, make_box, require_images

__all__ = ["read_psg", "read_haystack", "segment_boxes", "HAYSTACK_JSON_NAMES"]

HAYSTACK_JSON_NAMES = ("annotation_v1.json", "haystack.json")
UNUSABLE = -1


def segment_boxes(png_path: Path, segment_ids: list[int]) -> np.ndarray:
    """Tight x1 y1 x2 y2 box of each panoptic segment id in a COCO panoptic PNG."""
    from PIL import Image

    rgb = np.asarray(Image.open(png_path).convert("RGB"), dtype=np.int64)
    ids = rgb[..., 0] + 256 * rgb[..., 1] + 256 * 256 * rgb[..., 2]
    out = np.zeros((len(segment_ids), 4))
    for k, sid in enumerate(segment_ids):
        ys, xs = np.nonzero(ids == sid)
        if ys.size == 0:
            raise ValueError(f"{png_path}: segment id {sid} does not occur in the panoptic map")
        out[k] = [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]
    return out


def _triples(d: dict, key: str, preds: list[str], notes: Counter, where: Path) -> list[tuple[int, int, str]]:
    """[subject, object, predicate] triples of one entry: -1 predicates and self relations skipped
    (and counted); any other predicate outside the list is a malformed file."""
    out = []
    for t in d.get(key) or []:
        s, o, p = (int(v) for v in t)
        if p == UNUSABLE:
            notes[f"{key} with predicate -1 skipped (unusable, as Haystack's scorer)"] += 1
            continue
        if not 0 <= p < len(preds):
            raise ValueError(f"{where}: image_id={d['image_id']!r} {key} {list(t)} has predicate {p}, outside "
                             f"the {len(preds)} predicate_classes")
        if s == o:
            notes[f"{key} with subject == object dropped"] += 1
            continue
        out.append((s, o, preds[p]))
    return out


def _read(path: str | Path, *, source: str, split: str, json_names: tuple[str, ...], boxes_from: str,
          with_negatives: bool, image_dir: str) -> BenchmarkData:
    root = Path(path)
    f = next((root / n for n in json_names if (root / n).is_file()), root / json_names[0]) if root.is_dir() else root
    root = f.parent
    if not f.is_file():
        raise FileNotFoundError(f"{source}: annotation file not found; looked for {[str(root / n) for n in json_names]}")
    if boxes_from not in ("annotations", "segments"):
        raise ValueError(f"boxes_from must be 'annotations' or 'segments', got {boxes_from!r}")
    doc = json.loads(f.read_text())
    classes = list(doc["thing_classes"]) + list(doc["stuff_classes"])
    preds = list(doc["predicate_classes"])
    if "test_image_ids" not in doc and not with_negatives:
        raise ValueError(f"{f}: no 'test_image_ids'; PSG's split is defined by that list")
    every_test = "test_image_ids" not in doc  # Haystack: an evaluation set
    test_ids = {str(i) for i in doc.get("test_image_ids", [])}
    notes: Counter = Counter()
    rows, present = [], set()
    for d in doc["data"]:
        iid = str(d["image_id"])
        own = "test" if every_test or iid in test_ids else "train"
        present.add(own)
        if own != split and split != "all":
            continue
        pos = _triples(d, "relations", preds, notes, f)
        neg = _triples(d, "neg_relations", preds, notes, f) if with_negatives else []
        if not pos and not neg:
            if d.get("relations") or d.get("neg_relations"):
                notes["images dropped: no usable relation left"] += 1
            continue
        w, h = float(d["width"]), float(d["height"])
        if boxes_from == "segments":
            b = segment_boxes(root / d["pan_seg_file_name"], [int(s["id"]) for s in d["segments_info"]])
        else:
            b = np.array([a["bbox"] for a in d["annotations"]], dtype=np.float64).reshape(-1, 4)
        b = _clip_box(b, w, h)
        cats = [classes[int(a["category_id"])] for a in d["annotations"]]
        rel = [{"subject": s, "object": o, "predicate": p, "pass": "human", "gate": "kept", "score": None}
               for s, o, p in pos]
        row = {"image_id": iid, "uri": str(root / image_dir / d["file_name"]), "width": int(w), "height": int(h),
               "source": source, "split": split, "boxes": [make_box(*bb, c) for bb, c in zip(b, cats)],
               "relations": rel}
        if with_negatives:
            row["cells"] = ([{"subject": s, "object": o, "predicate": p, "label": True} for s, o, p in pos]
                            + [{"subject": s, "object": o, "predicate": p, "label": False} for s, o, p in neg])
        rows.append(row)
    require_images(rows, name=source, where=f, split=split, present=present)
    corpus, cells = build_tables(source, rows)
    return BenchmarkData(source, corpus, cells, tuple(preds), notes=dict(notes))


@READERS.register("psg")
def read_psg(path: str | Path, *, split: str = "test", json_name: str = "psg.json",
             boxes_from: str = "annotations", image_dir: str = "images") -> BenchmarkData:
    """PSG (Yang et al. 2022): 56 predicates over COCO panoptic segments."""
    return _read(path, source="psg", split=split, json_names=(json_name,), boxes_from=boxes_from,
                 with_negatives=False, image_dir=image_dir)


@READERS.register("haystack")
def read_haystack(path: str | Path, *, split: str = "test", json_name: str | None = None,
                  boxes_from: str = "annotations", image_dir: str = "images") -> BenchmarkData:
    """Haystack (Lorenz et al. 2023): PSG layout plus explicit, adjudicated negatives."""
    names = (json_name,) if json_name else HAYSTACK_JSON_NAMES
    return _read(path, source="haystack", split=split, json_names=names, boxes_from=boxes_from,
                 with_negatives=True, image_dir=image_dir)
