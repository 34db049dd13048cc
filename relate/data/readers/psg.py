"""PSG (psg.json + COCO panoptic PNGs) and Haystack (the same layout with explicit negatives).

psg.json holds ``thing_classes``, ``stuff_classes`` and ``predicate_classes`` (0-based), the
``test_image_ids`` list, and per image ``data`` entries with ``file_name``, ``height``, ``width``,
``image_id``, ``pan_seg_file_name``, ``segments_info`` (one per object, COCO panoptic), the
row-aligned ``annotations`` (``bbox`` as absolute x1 y1 x2 y2, ``category_id`` into things +
stuff) and ``relations`` as [subject, object, predicate] triples. Boxes come from the annotations
by default or, with ``boxes_from="segments"``, from the panoptic PNG itself (segment id = R +
256 G + 256^2 B, COCO's encoding).

Haystack reuses PSG's predicates and layout; each entry adds ``neg_relations``: cells an
annotator inspected and marked false. Positives and negatives become labelled cells (A2).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from relate.data.readers.base import READERS, BenchmarkData, _clip_box, build_tables, make_box

__all__ = ["read_psg", "read_haystack", "segment_boxes"]


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


def _read(path: str | Path, *, source: str, split: str, json_name: str, boxes_from: str,
          with_negatives: bool, filter_empty_rels: bool) -> BenchmarkData:
    root = Path(path)
    f = root / json_name if root.is_dir() else root
    root = f.parent
    if not f.is_file():
        raise FileNotFoundError(f"{f}: {source} annotation file not found")
    if boxes_from not in ("annotations", "segments"):
        raise ValueError(f"boxes_from must be 'annotations' or 'segments', got {boxes_from!r}")
    doc = json.loads(f.read_text())
    classes = list(doc["thing_classes"]) + list(doc["stuff_classes"])
    preds = list(doc["predicate_classes"])
    test_ids = {str(i) for i in doc.get("test_image_ids", [])}
    rows = []
    for d in doc["data"]:
        iid = str(d["image_id"])
        in_split = (iid in test_ids) == (split == "test") or split == "all"
        if not in_split:
            continue
        w, h = float(d["width"]), float(d["height"])
        if boxes_from == "segments":
            b = segment_boxes(root / d["pan_seg_file_name"], [int(s["id"]) for s in d["segments_info"]])
        else:
            b = np.array([a["bbox"] for a in d["annotations"]], dtype=np.float64).reshape(-1, 4)
        b = _clip_box(b, w, h)
        cats = [classes[int(a["category_id"])] for a in d["annotations"]]
        rel = lambda t: {"subject": int(t[0]), "object": int(t[1]), "predicate": preds[int(t[2])],  # noqa: E731
                         "pass": "human", "gate": "kept", "score": None}
        r = [rel(t) for t in d.get("relations", []) if t[0] != t[1]]
        if filter_empty_rels and not r and not d.get("neg_relations"):
            continue
        row = {"image_id": iid, "uri": str(root / "images" / d["file_name"]), "width": int(w), "height": int(h),
               "source": source, "split": split, "boxes": [make_box(*bb, c) for bb, c in zip(b, cats)], "relations": r}
        if with_negatives:
            cell = lambda t, y: {"subject": int(t[0]), "object": int(t[1]), "predicate": preds[int(t[2])], "label": y}  # noqa: E731
            row["cells"] = [cell(t, True) for t in d.get("relations", []) if t[0] != t[1]] + \
                           [cell(t, False) for t in d.get("neg_relations", []) if t[0] != t[1]]
        rows.append(row)
    corpus, cells = build_tables(source, rows)
    return BenchmarkData(source, corpus, cells, tuple(preds))


@READERS.register("psg")
def read_psg(path: str | Path, *, split: str = "test", json_name: str = "psg.json",
             boxes_from: str = "annotations", filter_empty_rels: bool = True) -> BenchmarkData:
    """PSG (Yang et al. 2022): 56 predicates over COCO panoptic segments."""
    return _read(path, source="psg", split=split, json_name=json_name, boxes_from=boxes_from,
                 with_negatives=False, filter_empty_rels=filter_empty_rels)


@READERS.register("haystack")
def read_haystack(path: str | Path, *, split: str = "test", json_name: str = "haystack.json",
                  boxes_from: str = "annotations") -> BenchmarkData:
    """Haystack (Lorenz et al. 2023): PSG layout plus explicit, adjudicated negatives."""
    return _read(path, source="haystack", split=split, json_name=json_name, boxes_from=boxes_from,
                 with_negatives=True, filter_empty_rels=True)
