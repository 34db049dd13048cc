"""VG150 ground truth under ``protocol: sgb``: boxes and rows as Scene-Graph-Benchmark's loader keeps them.

The h5 is written in the real ``VG-SGG-with-attri.h5`` layout (int32 ``boxes_1024`` in centre format,
global box indices in ``relationships``, ``labels`` and ``predicates`` as (N, 1) columns). Every
expected box below is worked by hand from SGB's ``visual_genome.py``: ``load_graphs`` turns the
centre into a corner inside the h5's int32 array (truncating toward zero) and adds the size in
integers; ``get_groundtruth(evaluation=True)`` divides by 1024, multiplies by the longer image side,
holds the result as float32 and clips it to [0, width - 1] x [0, height - 1] without removing
anything. The default (``paper``) reading of the same file is worked beside it, so each case fails
if the two conventions were swapped or mixed.
"""

from __future__ import annotations

import json

import h5py
import numpy as np
import pyarrow as pa
import pytest

from relate.data.readers import EmptySplitError, read_vg150
from relate.schema import CORPUS_SCHEMA, PREDICTIONS_SCHEMA, SchemaError, to_table, validate_corpus

# (cx, cy, w, h) in the 1024 frame, one row per box; image 0 is 2048 x 1024 (factor 2, exact in
# binary), image 1 is 512 x 384 (factor 0.5), image 2 is 1024 x 768 (factor 1)
BOXES_1024 = [
    [101, 51, 21, 11],    # 0  odd sizes: the integer corner and the float corner part by a frame pixel
    [3, 40, 9, 20],       # 1  corner at -1.5: truncation toward zero gives -1 (a floor would give -2)
    [1020, 510, 10, 6],   # 2  runs past the right and bottom edges
    [1025, 100, 2, 4],    # 3  starts on the last pixel column: flat after SGB's clip
    [200, 100, 1, 1],     # 4  one frame pixel: half an image pixel at factor 0.5 (degenerate)
    [300, 300, 40, 40],   # 5  ordinary
    [50, 50, 10, 10],     # 6
    [80, 80, 20, 20],     # 7
]
# SGB, box by box (corners in the 1024 frame, then x factor, then the clip):
#  0: x1 = trunc(101 - 10.5) = 90, y1 = trunc(51 - 5.5) = 45, x2 = 90 + 21 = 111, y2 = 45 + 11 = 56
#     x2 -> (180, 90, 222, 112)
#  1: x1 = trunc(3 - 4.5) = trunc(-1.5) = -1, y1 = 40 - 10 = 30, x2 = -1 + 9 = 8, y2 = 50
#     x2 -> (-2, 60, 16, 100); clip x1 to 0 -> (0, 60, 16, 100)
#  2: x1 = 1015, y1 = 507, x2 = 1025, y2 = 513; x2 -> (2030, 1014, 2050, 1026);
#     clip to width - 1 = 2047 and height - 1 = 1023 -> (2030, 1014, 2047, 1023)
#  3: x1 = 1024, y1 = 98, x2 = 1026, y2 = 102; x2 -> (2048, 196, 2052, 204); clip x to 2047 -> (2047, 196, 2047, 204)
#  4: x1 = trunc(199.5) = 199, y1 = 99, x2 = 200, y2 = 100; x0.5 -> (99.5, 49.5, 100, 50), kept half a pixel wide
#  5: (280, 280, 320, 320) x0.5 -> (140, 140, 160, 160)
#  6: (45, 45, 55, 55), 7: (70, 70, 90, 90) at factor 1
SGB_BOXES = {"0": [(180, 90, 222, 112), (0, 60, 16, 100), (2030, 1014, 2047, 1023), (2047, 196, 2047, 204)],
             "1": [(99.5, 49.5, 100, 50), (140, 140, 160, 160)],
             "2": [(45, 45, 55, 55), (70, 70, 90, 90)]}
# The paper reading: float corners (cx -/+ w/2) x factor, clipped to [0, width] x [0, height], then
# widened to at least one pixel:
#  0: (90.5, 45.5, 111.5, 56.5) x2 -> (181, 91, 223, 113): one pixel off SGB on every side
#  1: (-1.5, 30, 7.5, 50) x2 -> (-3, 60, 15, 100) -> clip (0, 60, 15, 100): x2 one pixel short of SGB's 16
#  2: (1015, 507, 1025, 513) x2 -> clip to 2048 / 1024 -> (2030, 1014, 2048, 1024)
#  3: (1024, 98, 1026, 102) x2 -> clip -> (2048, 196, 2048, 204) -> widened: x1 = 2048 - 1 -> (2047, 196, 2048, 204)
#  4: (199.5, 99.5, 200.5, 100.5) x0.5 -> (99.75, 49.75, 100.25, 50.25) -> widened to 1 px: (99.75, 49.75, 100.75, 50.75)
PAPER_BOXES = {"0": [(181, 91, 223, 113), (0, 60, 15, 100), (2030, 1014, 2048, 1024), (2047, 196, 2048, 204)],
               "1": [(99.75, 49.75, 100.75, 50.75), (140, 140, 160, 160)]}
# global box indices, predicate ids (1 on, 2 near): image 0 has a relation annotated twice, image 1
# a self relation beside a real one, image 2 nothing but a self relation
RELATIONSHIPS = [[0, 1], [0, 1], [2, 3], [4, 4], [4, 5], [6, 6]]
PREDICATES = [1, 1, 2, 1, 2, 1]


def _write_vg(root, boxes=BOXES_1024, split=(2, 2, 2)):
    root.mkdir(parents=True, exist_ok=True)
    n = len(boxes)
    with h5py.File(root / "VG-SGG-with-attri.h5", "w") as f:
        f["split"] = np.asarray(split, np.int32)
        f["img_to_first_box"] = np.array([0, 4, 6], np.int32)
        f["img_to_last_box"] = np.array([3, 5, 7], np.int32)
        f["img_to_first_rel"] = np.array([0, 3, 5], np.int32)
        f["img_to_last_rel"] = np.array([2, 4, 5], np.int32)
        f["labels"] = np.array([[1], [2], [1], [2], [1], [2], [1], [2]], np.int64)
        f["attributes"] = np.zeros((n, 10), np.int64)
        f["boxes_1024"] = np.asarray(boxes, np.int32)
        f["boxes_512"] = np.asarray(boxes, np.int32) // 2
        f["active_object_mask"] = np.ones((n, 1), bool)
        f["relationships"] = np.asarray(RELATIONSHIPS, np.int32)
        f["predicates"] = np.asarray(PREDICATES, np.int64).reshape(-1, 1)
    (root / "VG-SGG-dicts-with-attri.json").write_text(json.dumps(
        {"idx_to_label": {"1": "man", "2": "horse"}, "idx_to_predicate": {"1": "on", "2": "near"},
         "label_to_idx": {"man": 1, "horse": 2}, "predicate_to_idx": {"on": 1, "near": 2}}))
    (root / "image_data.json").write_text(json.dumps([
        {"image_id": 0, "width": 2048, "height": 1024}, {"image_id": 1, "width": 512, "height": 384},
        {"image_id": 2, "width": 1024, "height": 768}]))
    return root


def _boxes(bench):
    return {r["image_id"]: [tuple(b[k] for k in ("x1", "y1", "x2", "y2")) for b in r["boxes"]]
            for r in bench.corpus.to_pylist()}


def _rels(bench):
    return {r["image_id"]: [(x["subject"], x["object"], x["predicate"]) for x in r["relations"]]
            for r in bench.corpus.to_pylist()}


def test_sgb_boxes_are_sgb_loaders_and_paper_boxes_are_the_projects(tmp_path):
    root = _write_vg(tmp_path / "vg")
    sgb, paper = read_vg150(root, protocol="sgb"), read_vg150(root)
    assert _boxes(sgb) == {k: [tuple(pytest.approx(float(c)) for c in b) for b in v] for k, v in SGB_BOXES.items()}
    assert _boxes(paper) == {k: [tuple(pytest.approx(float(c)) for c in b) for b in v] for k, v in PAPER_BOXES.items()}
    flat = _boxes(sgb)["0"][3]
    assert flat[0] == flat[2] == 2047.0  # SGB counts it one pixel wide (x2 - x1 + 1); not widened here
    assert _boxes(sgb)["1"][0][2] - _boxes(sgb)["1"][0][0] == 0.5


def test_sgb_keeps_self_relations_and_their_images(tmp_path):
    root = _write_vg(tmp_path / "vg")
    sgb, paper = read_vg150(root, protocol="sgb"), read_vg150(root)
    assert _rels(sgb) == {"0": [(0, 1, "on"), (0, 1, "on"), (2, 3, "near")],
                          "1": [(0, 0, "on"), (0, 1, "near")],
                          "2": [(0, 0, "on")]}
    # paper: the self relation of image 1 is dropped, and image 2 (nothing else) with it
    assert _rels(paper) == {"0": [(0, 1, "on"), (0, 1, "on"), (2, 3, "near")], "1": [(0, 1, "near")]}
    assert sorted(paper.notes.values()) == [1, 2] and sgb.notes == {}
    # the project's own tables still refuse what only sgb ground truth holds
    with pytest.raises(SchemaError, match="greater than x1"):
        validate_corpus(sgb.corpus)
    with pytest.raises(SchemaError, match="self-loop"):
        validate_corpus(sgb.corpus, allow_flat_boxes=True)


def test_gt_rows_count_what_sgb_keeps_and_what_was_read(tmp_path):
    root = _write_vg(tmp_path / "vg")
    # SGB keeps the 3 test images, their 4 + 2 + 2 boxes and 3 + 2 + 1 relation rows (repeats included)
    want = {"images": 3, "boxes": 8, "relations": 6}
    assert read_vg150(root, protocol="sgb").gt_rows() == {"reference_loader": want, "reader": want, "equal": True}
    paper = read_vg150(root).gt_rows()
    assert paper["reference_loader"] == want and not paper["equal"]
    assert paper["reader"] == {"images": 2, "boxes": 6, "relations": 4}


def test_sgb_refuses_what_its_loader_refuses_and_keeps_its_split_rule(tmp_path):
    bad = [list(b) for b in BOXES_1024]
    bad[5][2] = 0  # a box of width 0: SGB's load_graphs asserts every size is positive
    with pytest.raises(ValueError, match="size of 0"):
        read_vg150(_write_vg(tmp_path / "bad", boxes=bad), protocol="sgb")
    with pytest.raises(ValueError, match="protocol must be one of"):
        read_vg150(_write_vg(tmp_path / "vg"), protocol="motifs")
    # three training images and num_val_im=0: SGB carves nothing, so val and train are all three;
    # the paper reading takes val = the first 0 images
    root = _write_vg(tmp_path / "train", split=(0, 0, 0))
    assert read_vg150(root, split="val", num_val_im=0, protocol="sgb").corpus.num_rows == 3
    assert read_vg150(root, split="train", num_val_im=0, protocol="sgb").corpus.num_rows == 3
    assert read_vg150(root, split="val", num_val_im=2, protocol="sgb").corpus.column("image_id").to_pylist() == ["0", "1"]
    with pytest.raises(EmptySplitError):
        read_vg150(root, split="val", num_val_im=0)


def test_the_job_protocol_reaches_the_reader_and_the_results(tmp_path):
    """Through eval_jobs.ovsgg's stage functions: the cell carries the row counts, and a self
    relation sits in recall's denominator under sgb (no ordered pair can find it)."""
    from eval_jobs.ovsgg import BenchmarkSpec, OVSGGConfig
    from eval_jobs.ovsgg_cells import load_benchmark, score_cell

    root = _write_vg(tmp_path / "vg")
    spec = BenchmarkSpec(name="vg", axis="A1", reader="vg150", path=str(root))
    # predcls: every relation between two different boxes, each at score 1
    tri = lambda s, o, p: {"subject": s, "object": o, "predicate": p, "score": 1.0, "spatial_score": None,  # noqa: E731
                               "semantic_score": None}
    rows = [{"image_id": "0", "triplets": [tri(0, 1, "on"), tri(2, 3, "near")]},
            {"image_id": "1", "triplets": [tri(0, 1, "near")]},
            {"image_id": "2", "triplets": [tri(1, 0, "on")]}]  # image 2: only under sgb
    cells = {}
    for protocol, n in (("sgb", 3), ("paper", 2)):
        cfg = OVSGGConfig(benchmarks=[spec], protocol=protocol, ks=[50], headline_k=50,
                          bootstrap={"resamples": 0})
        cells[protocol] = score_cell(spec, load_benchmark(spec, protocol), to_table(rows[:n], PREDICTIONS_SCHEMA), cfg)
    assert cells["sgb"]["gt_rows"]["equal"] and not cells["paper"]["gt_rows"]["equal"]
    # sgb R@50: image 0 finds 3 of 3 rows (the repeat counts twice and is found twice), image 1 1 of 2
    # (its self relation is not findable), image 2 0 of 1: (1 + 0.5 + 0) / 3 = 0.5
    assert cells["sgb"]["recall"]["metrics"]["R@50"] == pytest.approx(0.5)
    # paper R@50: image 0 2 of 2 deduplicated, image 1 1 of 1, image 2 not read: 1.0
    assert cells["paper"]["recall"]["metrics"]["R@50"] == pytest.approx(1.0)
    spec_sgb = BenchmarkSpec(name="vg", axis="A1", reader="vg150", path=str(root), reader_options={"protocol": "sgb"})
    with pytest.raises(ValueError, match="disagrees with the job's protocol"):
        load_benchmark(spec_sgb, "paper")
    assert isinstance(load_benchmark(spec_sgb, "sgb").corpus, pa.Table)
