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


# ------------------------------------------------------------------ the field's loaders, rule by rule

def _vg(root, *, split, boxes_per_image, rels, image_data, preds=("on", "near")):
    """A hand-built Scene-Graph-Benchmark h5: image i owns ``boxes_per_image[i]`` boxes (each 20 x 20 at
    (50, 50) in the 1024 frame) and the (subject, object) local pairs ``rels[i]`` (predicate 1)."""
    root.mkdir(parents=True, exist_ok=True)
    fb, lb, fr, lr, rel = [], [], [], [], []
    n = 0
    for nb, rs in zip(boxes_per_image, rels):
        fb.append(n if nb else -1)
        lb.append(n + nb - 1 if nb else -1)
        fr.append(len(rel) if rs else -1)
        rel += [[n + s, n + o] for s, o in rs]
        lr.append(len(rel) - 1 if rs else -1)
        n += nb
    with h5py.File(root / "VG-SGG-with-attri.h5", "w") as f:
        f["split"] = np.asarray(split, np.int32)
        for k, v in (("img_to_first_box", fb), ("img_to_last_box", lb), ("img_to_first_rel", fr),
                     ("img_to_last_rel", lr)):
            f[k] = np.asarray(v, np.int32)
        f["labels"] = np.ones((n, 1), np.int32)
        f["boxes_1024"] = np.tile(np.array([[60, 60, 20, 20]], np.int32), (n, 1))
        f["relationships"] = np.asarray(rel, np.int32).reshape(-1, 2)
        f["predicates"] = np.ones((len(rel), 1), np.int32)
    (root / "VG-SGG-dicts-with-attri.json").write_text(json.dumps(
        {"idx_to_label": {"1": "cup"}, "idx_to_predicate": {str(i + 1): p for i, p in enumerate(preds)}}))
    (root / "image_data.json").write_text(json.dumps(image_data))
    return root


def test_vg150_skips_the_four_corrupted_images_before_aligning(tmp_path):
    """image_data.json lists VG ids 1592 and 4617 the h5 lacks: skipped, the rest aligned row by row."""
    meta = [{"image_id": 1592, "width": 9, "height": 9}, {"image_id": 10, "width": 2048, "height": 1024},
            {"image_id": 4617, "width": 9, "height": 9}, {"image_id": 11, "width": 512, "height": 1024}]
    root = _vg(tmp_path / "vg", split=[2, 2], boxes_per_image=[2, 2], rels=[[(0, 1)], [(1, 0)]], image_data=meta)
    b = read_vg150(root)
    got = {r["image_id"]: r for r in b.corpus.to_pylist()}
    assert sorted(got) == ["10", "11"]
    assert (got["10"]["width"], got["10"]["height"]) == (2048, 1024)
    assert got["10"]["boxes"][0]["x1"] == 100.0  # (60 - 10) * 2048 / 1024: the size of its own row
    assert got["11"]["boxes"][0]["x1"] == 50.0   # scale 1024 / 1024
    assert list(b.notes.values()) == [2]
    bad = meta + [{"image_id": 12, "width": 5, "height": 5}]
    (root / "image_data.json").write_text(json.dumps(bad))
    with pytest.raises(ValueError, match=r"image_data.json has 5 entries \(2 of them the corrupted.*3 against the h5's 2"):
        read_vg150(root)


def test_vg150_val_split_is_carved_from_the_training_images(tmp_path):
    """No val code: val = the first num_val_im training images that load, train = the rest; rows coded
    1 are never read."""
    meta = [{"image_id": i, "width": 100, "height": 100} for i in range(6)]
    root = _vg(tmp_path / "vg", split=[0, 0, 1, 0, 0, 2], boxes_per_image=[2, 2, 2, 0, 2, 2],
               rels=[[], [(0, 1)], [(0, 1)], [], [(0, 1)], [(0, 1)]], image_data=meta)
    ids = lambda **kw: read_vg150(root, num_val_im=1, **kw).corpus.column("image_id").to_pylist()  # noqa: E731
    assert ids(split="val") == ["1"]      # image 0 has no relation, image 3 no box: neither loads
    assert ids(split="train") == ["4"]
    assert ids(split="test") == ["5"]
    assert read_vg150(root, split="val", num_val_im=1).notes == {
        "h5 rows coded split 1 (never read by Scene-Graph-Benchmark)": 1}
    assert read_vg150(root, split="val", num_val_im=1, filter_empty_rels=False).corpus.column("image_id").to_pylist() == ["0"]
    with pytest.raises(EmptySplitError, match="split 'train'"):
        read_vg150(root, split="train")   # the default 5,000 val images swallow both


def test_vg150_self_relations_are_dropped_and_counted(tmp_path):
    meta = [{"image_id": i, "width": 100, "height": 100} for i in range(2)]
    root = _vg(tmp_path / "vg", split=[2, 2], boxes_per_image=[2, 2], rels=[[(0, 0), (0, 1)], [(1, 1)]], image_data=meta)
    b = read_vg150(root)
    assert b.corpus.column("image_id").to_pylist() == ["0"]
    assert [(x["subject"], x["object"]) for x in b.corpus.to_pylist()[0]["relations"]] == [(0, 1)]
    assert sorted(b.notes.values()) == [1, 2]  # two self relations; one image left with none


def _psg_doc(data, preds=("on", "near", "holding"), **extra):
    return {"thing_classes": ["person", "cup"], "stuff_classes": [], "predicate_classes": list(preds), "data": data,
            **extra}


def _psg_entry(iid, relations, neg=None):
    e = {"image_id": iid, "file_name": f"{iid}.jpg", "width": 100, "height": 80, "pan_seg_file_name": "x.png",
         "segments_info": [], "annotations": [{"bbox": [0, 0, 10, 10], "category_id": 0},
                                              {"bbox": [20, 20, 40, 40], "category_id": 1}],
         "relations": relations}
    if neg is not None:
        e["neg_relations"] = neg
    return e


def test_haystack_minus_one_is_unusable_not_the_last_predicate(tmp_path):
    doc = _psg_doc([_psg_entry(1, [[0, 1, -1], [0, 1, 0]], neg=[[1, 0, -1], [1, 0, 1]]),
                    _psg_entry(2, [], neg=[[0, 1, -1]]), _psg_entry(3, [], neg=[[0, 1, 2]])])
    (tmp_path / "annotation_v1.json").write_text(json.dumps(doc))
    b = read_benchmark("haystack", str(tmp_path))   # the release's file name; every image is test
    assert b.corpus.column("image_id").to_pylist() == ["1", "3"]  # image 2 held only a -1 triple
    cells = {r["image_id"]: sorted((c["subject"], c["object"], c["predicate"], c["label"]) for c in r["cells"])
             for r in b.cells.to_pylist()}
    assert cells == {"1": [(0, 1, "on", True), (1, 0, "near", False)], "3": [(0, 1, "holding", False)]}
    assert [x["predicate"] for x in b.corpus.to_pylist()[0]["relations"]] == ["on"]
    assert sum(v for k, v in b.notes.items() if "-1" in k) == 3
    doc["data"][0]["relations"].append([0, 1, 7])
    (tmp_path / "annotation_v1.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"annotation_v1.json: image_id=1 relations \[0, 1, 7\] has predicate 7"):
        read_benchmark("haystack", str(tmp_path))
    with pytest.raises(EmptySplitError, match=r"split 'train'.*\['test'\]"):
        read_benchmark("haystack", str(tmp_path), split="train")


def test_spatialsense_images_resolve_under_flickr_and_nyu(tmp_path):
    from PIL import Image

    ann = lambda: [{"_id": "1", "predicate": "on", "label": True,  # noqa: E731
                    "subject": {"name": "cup", "bbox": [0, 10, 0, 10]}, "object": {"name": "desk", "bbox": [5, 40, 0, 50]}}]
    doc = [{"url": "https://farm4.staticflickr.com/3543/5704634119_8b8ccf3229.jpg", "width": 60, "height": 50,
            "split": "test", "annotations": ann()},
           {"url": "nyu/kitchen_0001.jpg", "width": 60, "height": 50, "split": "test", "annotations": ann()}]
    (tmp_path / "annotations.json").write_text(json.dumps(doc))
    for sub, name in (("flickr", "5704634119_8b8ccf3229.jpg"), ("nyu", "kitchen_0001.jpg")):
        (tmp_path / "images" / sub).mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (60, 50)).save(tmp_path / "images" / sub / name)
    got = {r["image_id"]: r["uri"] for r in read_spatialsense(tmp_path).corpus.to_pylist()}
    assert got == {"5704634119_8b8ccf3229": str(tmp_path / "images/flickr/5704634119_8b8ccf3229.jpg"),
                   "kitchen_0001": str(tmp_path / "images/nyu/kitchen_0001.jpg")}
    assert all(Path(u).is_file() for u in got.values())


def _hico(root, images):
    (root / "annotations").mkdir(parents=True, exist_ok=True)
    (root / "annotations" / "test_hico.json").write_text(json.dumps(images))
    (root / "annotations" / "trainval_hico.json").write_text("[]")
    (root / "hico_list_vb.txt").write_text("id  vname\n-----\n1  hold\n2  no_interaction\n3  ride\n")
    (root / "coco_categories.json").write_text(json.dumps([{"id": 1, "name": "person"}, {"id": 2, "name": "cup"}]))
    return root


def _anno_bbox_mat(path, sizes):
    """A 1 x N MATLAB struct array like HICO-DET's bbox_test: filename and size.{width, height, depth}."""
    from scipy.io import savemat

    a = np.zeros((1, len(sizes)), dtype=[("filename", "O"), ("size", "O")])
    for i, (f, w, h) in enumerate(sizes):
        s = np.zeros((1, 1), dtype=[("width", "O"), ("height", "O"), ("depth", "O")])
        s[0, 0] = (w, h, 3)
        a[0, i] = (f, s)
    savemat(path, {"bbox_test": a})


def test_hico_det_keeps_its_no_interaction_image_and_sizes_are_never_guessed(tmp_path):
    from PIL import Image

    boxes = [{"bbox": [0, 0, 10, 10], "category_id": 1}, {"bbox": [5, 5, 20, 30], "category_id": 2}]
    root = _hico(tmp_path / "hico", [
        {"file_name": "A.jpg", "annotations": boxes, "hoi_annotation": [{"subject_id": 0, "object_id": 1, "category_id": 2}]},
        {"file_name": "B.jpg", "annotations": boxes + [{"bbox": [1, 1, 4, 4], "category_id": 2}],
         "hoi_annotation": [{"subject_id": 0, "object_id": 1, "category_id": 1},
                            {"subject_id": 0, "object_id": 2, "category_id": 2}]}])
    with pytest.raises(FileNotFoundError, match=r"no size for 2 image.*\['A.jpg', 'B.jpg'\]"):
        read_benchmark("hico_det", str(root))   # A (all no_interaction) is a test image too: it needs a size
    (root / "image_sizes.json").write_text(json.dumps({"A.jpg": [320, 240], "B.jpg": [640, 480]}))
    for cells in (False, True):
        b = read_benchmark("hico_det", str(root), cells=cells)
        r = b.corpus.to_pylist()
        assert [x["image_id"] for x in r] == ["A", "B"] and (r[1]["width"], r[1]["height"]) == (640, 480)
        assert r[0]["relations"] == []  # in the test set, in no recall denominator
        assert [(x["subject"], x["object"], x["predicate"]) for x in r[1]["relations"]] == [(0, 1, "hold")]
        assert b.notes == {"images without a relation, kept (every pair no_interaction; recall skips them)": 1}
    assert [sorted((c["object"], c["predicate"], c["label"]) for c in r["cells"]) for r in b.cells.to_pylist()] == \
        [[(1, "hold", False), (1, "ride", False)], [(1, "hold", True), (2, "hold", False), (2, "ride", False)]]
    width_of_b = lambda: read_benchmark("hico_det", str(root)).corpus.to_pylist()[1]["width"]  # noqa: E731
    (root / "image_sizes.json").unlink()
    _anno_bbox_mat(root / "anno_bbox.mat", [("A.jpg", 320, 240), ("B.jpg", 500, 375)])  # the release's own sizes
    assert width_of_b() == 500
    (root / "anno_bbox.mat").unlink()
    (root / "images" / "test2015").mkdir(parents=True)
    for name, size in (("A.jpg", (100, 80)), ("B.jpg", (300, 200))):
        Image.new("RGB", size).save(root / "images" / "test2015" / name)
    assert width_of_b() == 300  # from the header


@pytest.mark.parametrize("name", ["vg150", "indoorvg", "psg", "haystack", "hico_det", "spatialsense"])
def test_a_split_with_no_images_is_an_error(tmp_path, name):
    corpus = _corpus(n=2)
    EXPORTERS[name](corpus, tmp_path / name)
    split = "train"
    if name == "haystack":  # every Haystack image is a test image unless the file lists test ids
        doc = json.loads((tmp_path / name / "haystack.json").read_text())
        assert doc.pop("test_image_ids")
        (tmp_path / name / "haystack.json").write_text(json.dumps(doc))
    with pytest.raises(EmptySplitError, match=f"split '{split}'"):
        read_benchmark(name, str(tmp_path / name), split=split, **({"num_val_im": 0} if "vg" in name else {}))


def test_exclusion_list_drops_images_by_namespaced_id(tmp_path):
    corpus = _corpus(n=3)
    ids = corpus.column("image_id").to_pylist()
    EXPORTERS["haystack"](corpus, tmp_path / "h", cells=synthesize_negatives(corpus, seed=0))
    # Haystack numbers COCO images: coco:<id> is one of its images, vg:<same digits> is not
    (tmp_path / "excluded_ids.csv").write_text(f"image_id,reason\ncoco:{ids[1]},same_id\nvg:{ids[2]},same_id\n")
    b = read_benchmark("haystack", str(tmp_path / "h"), exclude=str(tmp_path / "excluded_ids.csv"))
    assert b.excluded == (ids[1],)
    assert ids[1] not in b.corpus.column("image_id").to_pylist() + b.cells.column("image_id").to_pylist()
    assert b.corpus.num_rows == 2 and b.cells.num_rows == 2
    (tmp_path / "all.txt").write_text("".join(f"coco:{i}\n" for i in ids))
    with pytest.raises(EmptySplitError, match="removes all 3 images"):
        read_benchmark("haystack", str(tmp_path / "h"), exclude=str(tmp_path / "all.txt"))
    from relate.data.readers import image_key, load_exclusions

    (tmp_path / "ids.txt").write_text("# leaked\nCOCO:000123\nvg:abc\npsg:0042\n")
    assert load_exclusions(tmp_path / "ids.txt") == {"coco:123", "vg:abc", "coco:42"}
    assert image_key("vg150", "000123") == image_key("indoorvg", 123) == "vg:123" != image_key("psg", "123")
    # a list from before namespaces: refused, naming the file, line and the fix
    (tmp_path / "old.csv").write_text(f"image_id,reason\n{ids[1]},same_id\n")
    with pytest.raises(ValueError, match=rf"old.csv line 2: image id '{ids[1]}' names no dataset; write <namespace>:<id>"):
        read_benchmark("haystack", str(tmp_path / "h"), exclude=str(tmp_path / "old.csv"))