"""HICO-DET as its own evaluation uses it: an image whose pairs are all ``no_interaction`` stays in
the test set. Its negatives and the false positives a system makes there count (A2's federated AP,
the cells calibration fits on, the evaluation ids the leakage filter keeps out of training); recall
leaves it out of its denominators because it has no GT relation.

The annotation is hand-made in the layout the reader reads: the PPDM / QPIC json port
(``annotations/test_hico.json``: ``file_name``, ``annotations`` with x1 y1 x2 y2 ``bbox`` and COCO
``category_id``, ``hoi_annotation`` with 1-based HICO verb ids), HICO's ``hico_list_vb.txt`` (a few
of its lines, with their ids: 37 hold, 58 no_interaction, 76 ride) and a COCO-style category list.
"""

from __future__ import annotations

import json

import pytest

from _rows import tri as _tri
from relate.data.readers import exclude_images, read_benchmark
from relate.schema import PREDICTIONS_SCHEMA, to_table

HOLD, NO_INTERACTION, RIDE = 37, 58, 76
PERSON, HORSE, CUP = 1, 19, 47  # COCO ids
IMG = ["HICO_test2015_00000001", "HICO_test2015_00000002", "HICO_test2015_00000003"]


def _hico(root):
    box = lambda x, cat: {"bbox": [x, 10, x + 40, 90], "category_id": cat}  # noqa: E731  (disjoint columns)
    hoi = lambda s, o, v: {"subject_id": s, "object_id": o, "category_id": v}  # noqa: E731
    test = [
        # 1: a person rides a horse; the cup beside them is annotated no_interaction
        {"file_name": f"{IMG[0]}.jpg", "img_id": 1, "annotations": [box(0, PERSON), box(50, HORSE), box(100, CUP)],
         "hoi_annotation": [hoi(0, 1, RIDE), hoi(0, 2, NO_INTERACTION)]},
        # 2: a person holds a cup
        {"file_name": f"{IMG[1]}.jpg", "img_id": 2, "annotations": [box(0, PERSON), box(50, CUP)],
         "hoi_annotation": [hoi(0, 1, HOLD)]},
        # 3: a person and a horse, annotated no_interaction and nothing else
        {"file_name": f"{IMG[2]}.jpg", "img_id": 3, "annotations": [box(0, PERSON), box(50, HORSE)],
         "hoi_annotation": [hoi(0, 1, NO_INTERACTION)]}]
    (root / "annotations").mkdir(parents=True)
    (root / "annotations" / "test_hico.json").write_text(json.dumps(test))
    (root / "annotations" / "trainval_hico.json").write_text("[]")
    (root / "hico_list_vb.txt").write_text("id  vname\n-----------\n37  hold\n58  no_interaction\n76  ride\n")
    (root / "coco_categories.json").write_text(json.dumps(
        [{"id": PERSON, "name": "person"}, {"id": HORSE, "name": "horse"}, {"id": CUP, "name": "cup"}]))
    (root / "image_sizes.json").write_text(json.dumps({f"{i}.jpg": [200, 100] for i in IMG}))
    return root


# the system: right on image 1 (ride .8) and image 2 (hold .6), and confident about image 3, where
# the annotator found no interaction (ride .9, hold .7)
PREDS = [(IMG[0], [_tri(0, 1, "ride", .8), _tri(0, 2, "hold", .3)]),
         (IMG[1], [_tri(0, 1, "hold", .6)]),
         (IMG[2], [_tri(0, 1, "ride", .9), _tri(0, 1, "hold", .7)])]


def _preds(ids):
    return to_table([{"image_id": i, "triplets": t} for i, t in PREDS if i in ids], PREDICTIONS_SCHEMA)


def test_the_all_no_interaction_image_is_read_with_its_negatives(tmp_path):
    b = read_benchmark("hico_det", str(_hico(tmp_path / "hico")), cells=True)
    rows = {r["image_id"]: r for r in b.corpus.to_pylist()}
    assert list(rows) == IMG and rows[IMG[2]]["relations"] == [] and len(rows[IMG[2]]["boxes"]) == 2
    assert [(x["subject"], x["object"], x["predicate"]) for x in rows[IMG[0]]["relations"]] == [(0, 1, "ride")]
    cells = {r["image_id"]: sorted((c["subject"], c["object"], c["predicate"], c["label"]) for c in r["cells"])
             for r in b.cells.to_pylist()}
    # no_interaction -> a negative for every verb of the list (hold, ride); an annotated verb -> a positive
    assert cells == {IMG[0]: [(0, 1, "ride", True), (0, 2, "hold", False), (0, 2, "ride", False)],
                     IMG[1]: [(0, 1, "hold", True)],
                     IMG[2]: [(0, 1, "hold", False), (0, 1, "ride", False)]}
    assert b.notes == {"images without a relation, kept (every pair no_interaction; recall skips them)": 1}
    assert b.predicates == ("hold", "ride")


def test_false_positives_on_it_count_in_federated_ap(tmp_path):
    from eval_jobs.ovsgg import BenchmarkSpec, OVSGGConfig
    from eval_jobs.ovsgg_cells import load_benchmark, score_cell

    spec = BenchmarkSpec(name="hico", axis="A2", reader="hico_det", path=str(_hico(tmp_path / "hico")), min_support=1)
    cfg = OVSGGConfig(benchmarks=[spec], ks=[2], headline_k=2, bootstrap={"resamples": 0})
    bench = load_benchmark(spec)
    f = score_cell(spec, bench, _preds(IMG), cfg)["federated"]
    # ride cells by score: image 3 (negative) .9, image 1 (0,1) (positive) .8, image 1 (0,2) (negative,
    # never scored) 0 -> the positive sits at rank 2: AP = 1/2. hold: image 3 (negative) .7, image 2
    # (positive) .6, image 1 (0,2) (negative) .3 -> AP = 1/2. fAP = 1/2; 2 positives in 3 + 1 + 2 = 6 cells.
    assert f["per_predicate_ap"] == pytest.approx({"hold": 0.5, "ride": 0.5})
    assert f["fAP"] == pytest.approx(0.5) and f["prevalence"] == pytest.approx(2 / 6)
    # leaving image 3 out, as the reader used to, hides both false positives: every AP would be 1
    without = exclude_images(bench, {f"hico:{IMG[2]}"})
    f_without = score_cell(spec, without, _preds(IMG[:2]), cfg)["federated"]
    assert f_without["fAP"] == pytest.approx(1.0) and f_without["prevalence"] == pytest.approx(2 / 4)


@pytest.mark.parametrize("protocol", ["paper", "sgb"])
def test_recall_leaves_it_out_of_its_denominators(tmp_path, protocol):
    from eval_jobs.ovsgg import BenchmarkSpec, OVSGGConfig
    from eval_jobs.ovsgg_cells import load_benchmark, score_cell

    spec = BenchmarkSpec(name="hico", axis="A1", reader="hico_det", path=str(_hico(tmp_path / "hico")))
    cfg = OVSGGConfig(benchmarks=[spec], ks=[2], headline_k=2, protocol=protocol, bootstrap={"resamples": 0})
    cell = score_cell(spec, load_benchmark(spec, protocol), _preds(IMG), cfg)
    # image 1: ride found (rank 1 of 2); image 2: hold found; image 3 has no GT relation, so its
    # predictions find nothing and it is in no average: R@2 = (1 + 1) / 2 = 1 (counted as 0 of
    # nothing it would be 2/3), mR@2 = (hold 1 + ride 1) / 2 = 1
    m = cell["recall"]["metrics"]
    assert (m["R@2"], m["mR@2"]) == (1.0, 1.0)
    if protocol == "paper":
        assert sorted(r["image_id"] for r in cell["_per_image"]) == IMG[:2]


def test_prepare_lists_it_among_the_evaluation_images(tmp_path):
    from eval_jobs.prepare import PrepareConfig, main

    res = main(PrepareConfig(benchmark="hico_det", root=str(_hico(tmp_path / "hico")), out_dir=str(tmp_path / "out"),
                             require_images=False, axis="A2"))
    # every test image is an evaluation image, so the leakage filter keeps image 3 out of training too
    assert (res.out_dir / "eval_ids.txt").read_text().split() == [f"hico:{i}" for i in IMG]
    counts = res.manifest["counts"]
    assert (counts["images"], counts["images_with_relations"], counts["negative_cells"]) == (3, 2, 4)
