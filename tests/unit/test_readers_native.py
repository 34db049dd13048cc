"""Every benchmark reader on fixtures written in its exact native layout by relate.data.export:
a corpus survives the round trip (boxes, categories, relations, labelled cells), plus the
layout-specific details (VG box scale, PSG panoptic segments, SpatialSense's [y1, y2, x1, x2])."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest

from relate.data.export import EXPORTERS, synthesize_negatives, write_psg, write_spatialsense, write_vg150
from relate.data.readers import READERS, EmptySplitError, read_benchmark, read_psg, read_spatialsense, read_vg150
from relate.schema import CORPUS_SCHEMA, to_table, validate_corpus

CATS = ["person", "cup", "table", "shirt", "dog"]
PREDS = ["on", "near", "holding", "wearing", "left of"]


def _corpus(n=6, seed=0, split="test"):
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        w, h = int(rng.integers(200, 640)), int(rng.integers(200, 480))
        nb = int(rng.integers(2, 5))
        boxes = []
        for k in range(nb):  # disjoint columns so panoptic segments keep every box whole
            x1 = k * w / nb + 1
            boxes.append({"x1": float(round(x1)), "y1": float(rng.integers(0, h // 2)),
                          "x2": float(round(x1 + w / nb - 3)), "y2": float(rng.integers(h // 2 + 1, h)),
                          "category": CATS[int(rng.integers(len(CATS)))], "is_person": False, "is_body_part": False})
        pairs = [(a, b) for a in range(nb) for b in range(nb) if a != b]
        pick = rng.choice(len(pairs), size=min(3, len(pairs)), replace=False)
        rels = [{"subject": pairs[j][0], "object": pairs[j][1], "predicate": PREDS[int(rng.integers(len(PREDS)))],
                 "pass": "human", "gate": "kept", "score": None} for j in pick]
        rows.append({"image_id": f"img{seed}_{i}", "uri": "u", "width": w, "height": h, "source": "synthetic",
                     "split": split, "boxes": boxes, "relations": rels})
    t = to_table(rows, CORPUS_SCHEMA)
    validate_corpus(t)
    return t


def _triples(table, tol=0):
    out = {}
    for r in table.to_pylist():
        bx = [(round(b["x1"] / 2, tol), round(b["y1"] / 2, tol), round(b["x2"] / 2, tol), round(b["y2"] / 2, tol),
               b["category"]) for b in r["boxes"]]
        out[r["image_id"]] = sorted((bx[x["subject"]], x["predicate"], bx[x["object"]]) for x in r["relations"])
    return out


def _same_graphs(got, want, tol):
    """Each read box maps to an original box (same category, coordinates within ``tol``) and the
    relations agree in the original box indices."""
    want = {r["image_id"]: r for r in want.to_pylist()}
    for r in got.to_pylist():
        w = want[r["image_id"]]
        assert (r["width"], r["height"]) == (w["width"], w["height"])
        m = []
        for b in r["boxes"]:
            d = [max(abs(b[k] - c[k]) for k in ("x1", "y1", "x2", "y2")) if c["category"] == b["category"] else 1e9
                 for c in w["boxes"]]
            assert min(d) <= tol, (r["image_id"], b, d)
            m.append(int(np.argmin(d)))
        assert sorted((m[x["subject"]], x["predicate"], m[x["object"]]) for x in r["relations"]) == \
            sorted((x["subject"], x["predicate"], x["object"]) for x in w["relations"])


def _cells(bench):
    out = {}
    boxes = {r["image_id"]: r["boxes"] for r in bench.corpus.to_pylist()}
    for r in bench.cells.to_pylist():
        bx = boxes[r["image_id"]]
        key = lambda k: (bx[k]["x1"], bx[k]["y1"], bx[k]["category"])  # noqa: E731
        out[r["image_id"]] = sorted((key(c["subject"]), c["predicate"], key(c["object"]), c["label"]) for c in r["cells"])
    return out


@pytest.mark.parametrize("name", ["vg150", "indoorvg", "psg", "haystack", "hico_det", "spatialsense"])
def test_round_trip_through_native_layout(tmp_path, name):
    corpus = _corpus()
    train = _corpus(n=2, seed=5, split="train")
    both = to_table(corpus.to_pylist() + train.to_pylist(), CORPUS_SCHEMA)
    cells = synthesize_negatives(both, seed=1)
    kw = {"cells": cells} if name in ("haystack", "hico_det", "spatialsense") else {}
    EXPORTERS[name](both, tmp_path / name, **kw)
    bench = read_benchmark(name, str(tmp_path / name), **({"cells": True} if name == "hico_det" else {}))
    assert bench.name == name and name in READERS
    assert sorted(bench.corpus.column("image_id").to_pylist()) == sorted(corpus.column("image_id").to_pylist())
    assert set(bench.corpus.column("split").to_pylist()) == {"test"}
    validate_corpus(bench.corpus)
    _same_graphs(bench.corpus, corpus, tol=1.0 if name in ("vg150", "indoorvg") else 1e-3)
    assert set(bench.predicates) >= {x["predicate"] for r in corpus.column("relations").to_pylist() for x in r}
    if name in ("haystack", "spatialsense"):
        want = {r["image_id"]: r["cells"] for r in cells.to_pylist()}
        got = _cells(bench)
        for iid, cs in got.items():
            assert sum(not c[3] for c in cs) == sum(not c["label"] for c in want[iid]) > 0
            assert sum(c[3] for c in cs) == sum(c["label"] for c in want[iid])
    if name == "hico_det":
        labels = [c["label"] for r in bench.cells.to_pylist() for c in r["cells"]]
        assert any(labels) and not all(labels)  # no_interaction pairs became negatives


def test_vg150_box_scale_and_degenerate_boxes(tmp_path):
    root = tmp_path / "vg"
    root.mkdir()
    with h5py.File(root / "VG-SGG-with-attri.h5", "w") as f:
        f["split"] = np.array([2, 0], np.int32)
        f["img_to_first_box"] = np.array([0, 2], np.int32)
        f["img_to_last_box"] = np.array([1, 2], np.int32)
        f["img_to_first_rel"] = np.array([0, -1], np.int32)
        f["img_to_last_rel"] = np.array([0, -1], np.int32)
        f["labels"] = np.array([[1], [2], [1]], np.int32)
        # image 0 is 2048 x 1024: factor 2 from the 1024 frame; (cx, cy, w, h)
        f["boxes_1024"] = np.array([[100, 50, 40, 20], [300, 200, 0, 10], [5, 5, 4, 4]], np.int32)
        f["relationships"] = np.array([[0, 1]], np.int32)
        f["predicates"] = np.array([[2]], np.int32)
    (root / "VG-SGG-dicts-with-attri.json").write_text(json.dumps(
        {"idx_to_label": {"1": "man", "2": "horse"}, "idx_to_predicate": {"1": "on", "2": "riding"}}))
    (root / "image_data.json").write_text(json.dumps([{"image_id": 7, "width": 2048, "height": 1024},
                                                      {"image_id": 8, "width": 10, "height": 10}]))
    b = read_vg150(root)
    assert b.corpus.num_rows == 1 and b.predicates == ("on", "riding")
    r = b.corpus.to_pylist()[0]
    assert r["image_id"] == "7" and (r["width"], r["height"]) == (2048, 1024)
    assert [r["boxes"][0][k] for k in ("x1", "y1", "x2", "y2")] == [160, 80, 240, 120]
    assert r["boxes"][1]["x2"] - r["boxes"][1]["x1"] == pytest.approx(1.0)  # zero width -> 1 px
    assert r["relations"][0]["predicate"] == "riding" and r["boxes"][1]["category"] == "horse"
    assert read_vg150(root, split="train", filter_empty_rels=False, num_val_im=0).corpus.num_rows == 1
    assert read_vg150(root, split="val", filter_empty_rels=False).corpus.num_rows == 1  # val comes from train
    with pytest.raises(KeyError, match="boxes_512"):
        read_vg150(root, box_scale=512)
    with pytest.raises(FileNotFoundError, match="image_data.json"):
        (root / "image_data.json").unlink()
        read_vg150(root)


def test_vg150_round_trip_is_exact_up_to_the_box_scale(tmp_path):
    corpus = _corpus(seed=3)
    write_vg150(corpus, tmp_path / "vg", box_scale=512)
    got = read_vg150(tmp_path / "vg", box_scale=512).corpus.to_pylist()
    for a, b in zip(sorted(got, key=lambda r: r["image_id"]), sorted(corpus.to_pylist(), key=lambda r: r["image_id"])):
        step = max(b["width"], b["height"]) / 512
        for ba, bb in zip(a["boxes"], b["boxes"]):
            for k in ("x1", "y1", "x2", "y2"):
                assert abs(ba[k] - bb[k]) <= step + 1e-6


def test_psg_boxes_from_panoptic_segments(tmp_path):
    corpus = _corpus(seed=4)
    write_psg(corpus, tmp_path / "psg")
    seg = read_psg(tmp_path / "psg", boxes_from="segments").corpus
    ann = read_psg(tmp_path / "psg").corpus
    assert _triples(seg, tol=0) == _triples(ann, tol=0)
    with pytest.raises(EmptySplitError, match=r"split 'train' of .*psg.json yields no images.*\['test'\]"):
        read_psg(tmp_path / "psg", split="train")
    with pytest.raises(ValueError, match="boxes_from"):
        read_psg(tmp_path / "psg", boxes_from="masks")


def test_spatialsense_box_order_and_labels(tmp_path):
    doc = [{"url": "http://x/abc.jpg", "width": 100, "height": 80, "split": "test", "annotations": [
        {"_id": "1", "predicate": "above", "label": True,
         "subject": {"name": "lamp", "bbox": [5, 20, 10, 30]}, "object": {"name": "desk", "bbox": [40, 70, 0, 90]}},
        {"_id": "2", "predicate": "under", "label": False,
         "subject": {"name": "lamp", "bbox": [5, 20, 10, 30]}, "object": {"name": "desk", "bbox": [40, 70, 0, 90]}}]},
        {"url": "http://x/train.jpg", "width": 10, "height": 10, "split": "train", "annotations": []}]
    (tmp_path / "annotations.json").write_text(json.dumps(doc))
    b = read_spatialsense(tmp_path)
    r = b.corpus.to_pylist()[0]
    assert r["image_id"] == "abc" and len(r["boxes"]) == 2
    assert [r["boxes"][0][k] for k in ("x1", "y1", "x2", "y2")] == [10, 5, 30, 20]
    assert [x["predicate"] for x in r["relations"]] == ["above"]
    assert [(c["predicate"], c["label"]) for c in b.cells.to_pylist()[0]["cells"]] == [("above", True), ("under", False)]
    write_spatialsense(b.corpus, tmp_path / "again", cells=b.cells)
    assert _cells(read_spatialsense(tmp_path / "again")) == _cells(b)


def test_unknown_reader_lists_valid_names():
    with pytest.raises(KeyError, match="valid names: haystack, hico_det, indoorvg, psg, spatialsense, vg150"):
        read_benchmark("openimages", "/nowhere")


def test_exported_images_resolve_from_the_reader(tmp_path):
    """Readers resolve image paths against the dataset folder, and exporters place the pixels there."""
    import numpy as np
    from PIL import Image

    from relate.data.export import EXPORTERS
    from relate.data.readers import read_benchmark
    from relate.data.synthetic import SyntheticConfig, make_scene
    from relate.schema import CORPUS_SCHEMA, to_table

    rows = []
    for i in range(3):
        s = make_scene(i, SyntheticConfig())
        path = tmp_path / f"{s.image_id}.png"
        Image.fromarray(s.image).save(path)
        rows.append(dict(image_id=s.image_id, uri=str(path), width=s.width, height=s.height, source="synthetic",
                         split="test", boxes=s.boxes,
                         relations=[dict(subject=r["subject"], object=r["object"], predicate=r["predicate"],
                                         gate="kept", score=None, **{"pass": "human"}) for r in s.relations]))
    corpus = to_table(rows, CORPUS_SCHEMA)
    for name in ("vg150", "psg", "spatialsense", "hico_det"):
        out = EXPORTERS[name](corpus, tmp_path / name)
        data = read_benchmark(name, out)
        for r in data.corpus.select(["image_id", "uri"]).to_pylist():
            uri = r["uri"]
            assert Path(uri).is_file(), (name, uri)
            src = next(x for x in rows if x["image_id"] == r["image_id"])
            got = np.asarray(Image.open(uri).convert("RGB"), dtype=np.float32)
            want = np.asarray(Image.open(src["uri"]).convert("RGB"), dtype=np.float32)
            assert got.shape == want.shape and np.abs(got - want).mean() < 6, name  # JPEG, same pixels
