"""Write a corpus table (CORPUS_SCHEMA) into each benchmark's exact native layout.

These exporters let the synthetic world appear as VG150, IndoorVG, PSG, Haystack, HICO-DET and
SpatialSense on disk, so every reader is tested on the real file layouts and the synthetic
benchmark is evaluated through the same readers as the real one. Negatives, where a layout has
them, come from a CELLS_SCHEMA table or from :func:`synthesize_negatives`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow as pa

from relate.data.readers.base import CELLS_SCHEMA
from relate.schema import to_table

__all__ = ["EXPORTERS", "synthesize_negatives", "simulate_detections", "export_benchmark_suite", "write_vg_h5",
           "write_vg150", "write_indoorvg", "write_psg", "write_haystack", "write_hico_det", "write_spatialsense"]

_SPLIT_CODE = {"train": 0, "val": 0, "test": 2}  # Scene-Graph-Benchmark carves val out of the train rows


def _rows(corpus: pa.Table) -> list[dict]:
    rows = corpus.to_pylist()
    for r in rows:
        r["split"] = r.get("split") or "test"
        for b in r["boxes"]:
            b["category"] = b["category"] or "object"
    return rows


def _write_image(src: str, dest: Path, width: int, height: int, quality: int = 92) -> None:
    """Place the corpus image at ``dest`` as JPEG (the benchmarks' format); a blank image of the
    right size stands in when the source is not a readable local file (fixtures without pixels)."""
    from PIL import Image

    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        with Image.open(src) as im:
            im.convert("RGB").save(dest, quality=quality)
    except (OSError, ValueError):
        Image.new("RGB", (int(width), int(height))).save(dest, quality=50)


def _write_images(rows: list[dict], image_dir: Path) -> None:
    for r in rows:
        _write_image(r["uri"], image_dir / f"{r['image_id']}.jpg", r["width"], r["height"])


def _cells_by_image(cells: pa.Table | None) -> dict[str, list[dict]]:
    return {} if cells is None else {r["image_id"]: r["cells"] for r in cells.to_pylist()}


def synthesize_negatives(corpus: pa.Table, *, seed: int = 0) -> pa.Table:
    """Labelled cells: every relation as a positive plus, per positive, two adjudicated-style
    negatives that a prior would get wrong: the reversed pair (direction) and another of the
    split's predicates on the same pair (content); neither is asserted by the corpus."""
    rng = np.random.default_rng(seed)
    vocab = sorted({r["predicate"] for row in corpus.column("relations").to_pylist() for r in row})
    out = []
    for row in corpus.select(["image_id", "relations"]).to_pylist():
        pos = {(r["subject"], r["object"], r["predicate"]) for r in row["relations"]}
        cells = [{"subject": s, "object": o, "predicate": p, "label": True} for s, o, p in sorted(pos)]
        for s, o, p in sorted(pos):
            cand = [(o, s, p)]
            if len(vocab) > 1:
                cand.append((s, o, vocab[int(rng.integers(len(vocab)))]))
            cells += [{"subject": a, "object": b, "predicate": q, "label": False}
                      for a, b, q in cand if (a, b, q) not in pos]
        seen, uniq = set(), []
        for c in cells:
            k = (c["subject"], c["object"], c["predicate"])
            if k not in seen:
                seen.add(k)
                uniq.append(c)
        out.append({"image_id": row["image_id"], "cells": uniq})
    return to_table(out, CELLS_SCHEMA, table="cells")


def write_vg_h5(corpus: pa.Table, out_dir: str | Path, *, box_scale: int = 1024, h5_name: str = "VG-SGG-with-attri.h5",
                dicts_name: str = "VG-SGG-dicts-with-attri.json", image_data_name: str = "image_data.json") -> Path:
    """Scene-Graph-Benchmark layout (see relate.data.readers.vg150 for the fields). Val images are
    written as the first training rows, which is where Scene-Graph-Benchmark takes its val split
    from: read them back with ``num_val_im`` set to their number."""
    import h5py

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = sorted(_rows(corpus), key=lambda r: r["split"] != "val")  # val = the first train-coded rows
    labels = sorted({b["category"] for r in rows for b in r["boxes"]})
    preds = sorted({x["predicate"] for r in rows for x in r["relations"]})
    lab_idx = {c: i + 1 for i, c in enumerate(labels)}
    pred_idx = {p: i + 1 for i, p in enumerate(preds)}
    split, fb, lb, fr, lr, lab, box, rel, prd, meta = [], [], [], [], [], [], [], [], [], []
    for r in rows:
        n0, r0 = len(lab), len(rel)
        scale = box_scale / max(r["width"], r["height"])
        for b in r["boxes"]:
            w, h = b["x2"] - b["x1"], b["y2"] - b["y1"]
            box.append([(b["x1"] + w / 2) * scale, (b["y1"] + h / 2) * scale, w * scale, h * scale])
            lab.append(lab_idx[b["category"]])
        for x in r["relations"]:
            rel.append([n0 + x["subject"], n0 + x["object"]])
            prd.append(pred_idx[x["predicate"]])
        split.append(_SPLIT_CODE.get(r["split"], 2))
        fb.append(n0 if r["boxes"] else -1)
        lb.append(len(lab) - 1 if r["boxes"] else -1)
        fr.append(r0 if r["relations"] else -1)
        lr.append(len(rel) - 1 if r["relations"] else -1)
        meta.append({"image_id": r["image_id"], "width": r["width"], "height": r["height"],
                     "url": f"https://example.invalid/{r['image_id']}.jpg", "coco_id": None, "flickr_id": None})
    _write_images(rows, out / "images")
    with h5py.File(out / h5_name, "w") as f:
        f["split"] = np.asarray(split, np.int32)
        for k, v in (("img_to_first_box", fb), ("img_to_last_box", lb), ("img_to_first_rel", fr), ("img_to_last_rel", lr)):
            f[k] = np.asarray(v, np.int32)
        f["labels"] = np.asarray(lab, np.int32).reshape(-1, 1)
        f[f"boxes_{box_scale}"] = np.rint(np.asarray(box, np.float64).reshape(-1, 4)).astype(np.int32)
        f["relationships"] = np.asarray(rel, np.int32).reshape(-1, 2)
        f["predicates"] = np.asarray(prd, np.int32).reshape(-1, 1)
        f["active_object_mask"] = np.ones((len(lab), 1), bool)
    dicts = {"idx_to_label": {str(v): k for k, v in lab_idx.items()}, "label_to_idx": lab_idx,
             "idx_to_predicate": {str(v): k for k, v in pred_idx.items()}, "predicate_to_idx": pred_idx}
    (out / dicts_name).write_text(json.dumps(dicts))
    (out / image_data_name).write_text(json.dumps(meta))
    return out


def write_vg150(corpus: pa.Table, out_dir: str | Path, **kw) -> Path:
    return write_vg_h5(corpus, out_dir, **kw)


def write_indoorvg(corpus: pa.Table, out_dir: str | Path, **kw) -> Path:
    kw.setdefault("h5_name", "IndoorVG.h5")
    kw.setdefault("dicts_name", "IndoorVG-dicts.json")
    return write_vg_h5(corpus, out_dir, **kw)


def _id_rgb(k: int) -> tuple[int, int, int]:
    return k % 256, (k // 256) % 256, k // 65536


def _write_panoptic(path: Path, r: dict) -> list[dict]:
    """COCO panoptic PNG: each box painted as its segment, larger boxes first so small ones stay
    visible; returns the segments_info entries (ids 1..n, in box order)."""
    from PIL import Image

    canvas = np.zeros((r["height"], r["width"], 3), np.uint8)
    areas = [(b["x2"] - b["x1"]) * (b["y2"] - b["y1"]) for b in r["boxes"]]
    for k in np.argsort(areas)[::-1]:
        b = r["boxes"][k]
        canvas[int(round(b["y1"])):int(round(b["y2"])), int(round(b["x1"])):int(round(b["x2"]))] = _id_rgb(int(k) + 1)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(canvas).save(path)
    return [{"id": k + 1, "category_id": None, "iscrowd": 0, "isthing": 1, "area": float(a)} for k, a in enumerate(areas)]


def write_psg(corpus: pa.Table, out_dir: str | Path, *, json_name: str = "psg.json", cells: pa.Table | None = None,
              segments: bool = True) -> Path:
    """psg.json (+ panoptic PNGs); with ``cells``, false cells are written as ``neg_relations``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows, neg = _rows(corpus), _cells_by_image(cells)
    classes = sorted({b["category"] for r in rows for b in r["boxes"]})
    preds = sorted({x["predicate"] for r in rows for x in r["relations"]} |
                   {c["predicate"] for cs in neg.values() for c in cs})
    ci, pi = {c: i for i, c in enumerate(classes)}, {p: i for i, p in enumerate(preds)}
    data = []
    for r in rows:
        seg_name = f"panoptic/{r['image_id']}.png"
        info = _write_panoptic(out / seg_name, r) if segments else []
        for s, b in zip(info, r["boxes"]):
            s["category_id"] = ci[b["category"]]
        entry = {"file_name": f"{r['image_id']}.jpg", "height": r["height"], "width": r["width"],
                 "image_id": r["image_id"], "pan_seg_file_name": seg_name, "segments_info": info,
                 "annotations": [{"bbox": [b["x1"], b["y1"], b["x2"], b["y2"]], "bbox_mode": 0,
                                  "category_id": ci[b["category"]]} for b in r["boxes"]],
                 "relations": [[x["subject"], x["object"], pi[x["predicate"]]] for x in r["relations"]]}
        if cells is not None:
            entry["neg_relations"] = [[c["subject"], c["object"], pi[c["predicate"]]]
                                      for c in neg.get(r["image_id"], []) if not c["label"]]
        data.append(entry)
    doc = {"thing_classes": classes, "stuff_classes": [], "predicate_classes": preds, "data": data,
           "test_image_ids": [r["image_id"] for r in rows if r["split"] == "test"]}
    _write_images(rows, out / "images")
    (out / json_name).write_text(json.dumps(doc))
    return out


def write_haystack(corpus: pa.Table, out_dir: str | Path, *, cells: pa.Table | None = None, seed: int = 0,
                   segments: bool = False) -> Path:
    cells = cells if cells is not None else synthesize_negatives(corpus, seed=seed)
    return write_psg(corpus, out_dir, json_name="haystack.json", cells=cells, segments=segments)


def write_hico_det(corpus: pa.Table, out_dir: str | Path, *, cells: pa.Table | None = None,
                   images: bool = True) -> Path:
    """annotations/{trainval,test}_hico.json, hico_list_vb.txt, coco_categories.json and (with
    ``images``) the images as JPEG, since the json layout carries no image size.
    Pairs whose cells are all false are written as ``no_interaction``."""

    out = Path(out_dir)
    (out / "annotations").mkdir(parents=True, exist_ok=True)
    rows, neg = _rows(corpus), _cells_by_image(cells)
    cats = sorted({b["category"] for r in rows for b in r["boxes"]})
    verbs = sorted({x["predicate"] for r in rows for x in r["relations"]}) + ["no_interaction"]
    cid, vid = {c: i + 1 for i, c in enumerate(cats)}, {v: i + 1 for i, v in enumerate(verbs)}
    by_split: dict[str, list] = {"train": [], "test": []}
    for r in rows:
        sp = "test" if r["split"] == "test" else "train"
        hoi = [{"subject_id": x["subject"], "object_id": x["object"], "category_id": vid[x["predicate"]]}
               for x in r["relations"]]
        pos_pairs = {(x["subject"], x["object"]) for x in r["relations"]}
        neg_pairs = sorted({(c["subject"], c["object"]) for c in neg.get(r["image_id"], []) if not c["label"]} - pos_pairs)
        hoi += [{"subject_id": s, "object_id": o, "category_id": vid["no_interaction"]} for s, o in neg_pairs]
        by_split[sp].append({"file_name": f"{r['image_id']}.jpg", "img_id": len(by_split[sp]) + 1,
                             "annotations": [{"bbox": [b["x1"], b["y1"], b["x2"], b["y2"]], "category_id": cid[b["category"]]}
                                             for b in r["boxes"]], "hoi_annotation": hoi})
        if images:
            d = out / "images" / ("test2015" if sp == "test" else "train2015")
            d.mkdir(parents=True, exist_ok=True)
            _write_image(r["uri"], d / f"{r['image_id']}.jpg", r["width"], r["height"])
    (out / "annotations" / "trainval_hico.json").write_text(json.dumps(by_split["train"]))
    (out / "annotations" / "test_hico.json").write_text(json.dumps(by_split["test"]))
    (out / "hico_list_vb.txt").write_text("id  vname\n--------\n" + "".join(f"{i}  {v}\n" for v, i in vid.items()))
    (out / "coco_categories.json").write_text(json.dumps([{"id": i, "name": c} for c, i in cid.items()]))
    return out


def write_spatialsense(corpus: pa.Table, out_dir: str | Path, *, cells: pa.Table | None = None, seed: int = 0) -> Path:
    """annotations.json with boxes as [y1, y2, x1, x2] and a true/false label per triple; the images
    go under ``images/flickr/`` and their urls are Flickr addresses, as in the released dataset."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = _rows(corpus)
    cells = _cells_by_image(cells if cells is not None else synthesize_negatives(corpus, seed=seed))
    doc = []
    for r in rows:
        ent = lambda k: {"name": r["boxes"][k]["category"],  # noqa: E731
                         "bbox": [r["boxes"][k]["y1"], r["boxes"][k]["y2"], r["boxes"][k]["x1"], r["boxes"][k]["x2"]]}
        anns = [{"_id": f"{r['image_id']}_{j}", "predicate": c["predicate"], "subject": ent(c["subject"]),
                 "object": ent(c["object"]), "label": bool(c["label"])} for j, c in enumerate(cells.get(r["image_id"], []))]
        url = f"https://farm.staticflickr.invalid/0/{r['image_id']}.jpg"  # a Flickr address, as the real file
        doc.append({"url": url, "width": r["width"], "height": r["height"],
                    "split": {"val": "valid"}.get(r["split"], r["split"]), "annotations": anns})
    _write_images(rows, out / "images" / "flickr")  # where the released archive puts Flickr images
    (out / "annotations.json").write_text(json.dumps(doc))
    return out


EXPORTERS: dict[str, Callable[..., Path]] = {
    "vg150": write_vg150, "indoorvg": write_indoorvg, "psg": write_psg, "haystack": write_haystack,
    "hico_det": write_hico_det, "spatialsense": write_spatialsense,
}


def simulate_detections(corpus: pa.Table, *, recall: float = 0.85, jitter: float = 0.04, duplicates: float = 0.3,
                        distractors: int = 2, seed: int = 0) -> pa.Table:
    """A shared detector's boxes (IMAGE_SCHEMA) for detection-mode tests of the synthetic world:
    each GT box is found with probability ``recall`` and jittered by ``jitter`` of its size,
    a share ``duplicates`` of found boxes gets a near-copy (what the legacy matcher over-credits),
    plus ``distractors`` random boxes per image. Categories are kept, as a detector would name them."""
    from relate.schema import IMAGE_SCHEMA

    rng = np.random.default_rng(seed)
    rows = []
    for r in corpus.select(["image_id", "uri", "width", "height", "source", "split", "boxes"]).to_pylist():
        W, H = r["width"], r["height"]
        out = []

        def add(x1, y1, x2, y2, cat):
            x1, x2 = np.clip([x1, x2], 0, W)
            y1, y2 = np.clip([y1, y2], 0, H)
            if x2 - x1 >= 1 and y2 - y1 >= 1:
                out.append({"x1": float(x1), "y1": float(y1), "x2": float(x2), "y2": float(y2), "category": cat,
                            "is_person": False, "is_body_part": False})

        for b in r["boxes"]:
            if rng.random() > recall:
                continue
            w, h = b["x2"] - b["x1"], b["y2"] - b["y1"]
            d = rng.normal(0, jitter, 4) * [w, h, w, h]
            add(b["x1"] + d[0], b["y1"] + d[1], b["x2"] + d[2], b["y2"] + d[3], b["category"])
            if rng.random() < duplicates:
                d = rng.normal(0, jitter, 4) * [w, h, w, h]
                add(b["x1"] + d[0], b["y1"] + d[1], b["x2"] + d[2], b["y2"] + d[3], b["category"])
        for _ in range(distractors):
            x, y = rng.uniform(0, W * 0.8), rng.uniform(0, H * 0.8)
            add(x, y, x + rng.uniform(4, W * 0.2), y + rng.uniform(4, H * 0.2), None)
        rows.append({**r, "source": "detector", "boxes": out})
    return to_table(rows, IMAGE_SCHEMA, table="detections")


def export_benchmark_suite(corpus: pa.Table, out_dir: str | Path, *, seed: int = 0) -> dict[str, Path]:
    """The synthetic OV-SGG-Bench: the corpus's test split written as VG150 and PSG (A1),
    Haystack with synthesized negatives (A2), SpatialSense restricted to spatial predicates
    (A6) and PSG again with simulated detections (A4, ``detections.parquet`` beside it)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from relate.data.lexicon import CONCEPTS, SURFACE_TO_CONCEPT

    out = Path(out_dir)
    test = corpus.filter(pc.equal(pc.fill_null(corpus.column("split"), "test"), "test"))
    paths = {"vg150": write_vg150(test, out / "vg150"), "psg": write_psg(test, out / "psg"),
             "haystack": write_haystack(test, out / "haystack", seed=seed)}
    spatial = {f for f, c in SURFACE_TO_CONCEPT.items() if CONCEPTS[c].family in ("spatial", "depth")}
    rows = []
    for r in test.to_pylist():
        r["relations"] = [x for x in r["relations"] if x["predicate"] in spatial]
        if r["relations"]:
            rows.append(r)
    if rows:
        paths["spatialsense"] = write_spatialsense(to_table(rows, corpus.schema), out / "spatialsense", seed=seed)
    paths["psg_det"] = write_psg(test, out / "psg_det", segments=False)
    pq.write_table(simulate_detections(test, seed=seed), out / "psg_det" / "detections.parquet")
    return paths
