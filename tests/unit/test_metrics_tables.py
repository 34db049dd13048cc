"""Pair-recall ceiling, shared triplet mass, frequency baseline, per-edge accuracy and join,
synonym-tolerant matching with MRR / median rank, and the H.3 prior-violation check."""

from __future__ import annotations

import math

import numpy as np
import pytest

from _rows import box as _box, img as _img, rel as _rel, tri as _tri
from relate.metrics import (calibrate_synonym_threshold, edge_accuracy, edge_join, evaluate_open_vocab,
                            evaluate_recall, fit_frequency_baseline, load_detections, load_ground_truth,
                            load_predictions, pair_recall_ceiling, prior_violation_check, rank_of_truth,
                            shared_triplet_mass)
from relate.metrics.openvocab import SynonymMatcher
from relate.metrics.priors import corpus_disjoint_rate
from relate.schema import CORPUS_SCHEMA, IMAGE_SCHEMA, PREDICTIONS_SCHEMA, to_table


def test_pair_recall_ceiling_hand_computed():
    gt = load_ground_truth(to_table([_img("A", [_box(0, 0, 10, 10), _box(20, 20, 30, 30), _box(50, 50, 60, 60)],
                                          [_rel(0, 1, "on"), _rel(1, 2, "near")])], CORPUS_SCHEMA))
    det = load_detections(to_table([{"image_id": "A", "uri": "u", "width": 100, "height": 100, "source": "d",
                                     "split": None, "boxes": [_box(0, 0, 10, 11), _box(21, 21, 30, 30),
                                                              _box(80, 80, 90, 90), _box(0, 0, 10, 10)]}],
                                   IMAGE_SCHEMA), gt)
    r = pair_recall_ceiling(gt, det)
    assert r["ceiling"] == 0.5 and r["object_recall"] == pytest.approx(2 / 3) and r["boxes_per_image"] == 4
    assert pair_recall_ceiling(gt, det, iou_threshold=0.95)["ceiling"] == 0.0  # box 1 has IoU 0.81


def _train():
    person, shirt, table, cup = (_box(0, 0, 10, 30, "person"), _box(2, 5, 8, 15, "shirt"),
                                 _box(40, 40, 90, 60, "table"), _box(50, 30, 60, 40, "cup"))
    return to_table([
        _img("t1", [person, shirt], [_rel(0, 1, "wearing")]),
        _img("t2", [person, shirt], [_rel(0, 1, "wearing")]),
        _img("t3", [person, shirt], [_rel(0, 1, "wearing"), _rel(0, 1, "has")]),
        _img("t4", [cup, table], [_rel(0, 1, "on")]),
    ], CORPUS_SCHEMA)


def test_shared_triplet_mass_components():
    bench = to_table([_img("b1", [_box(0, 0, 10, 30, "Person"), _box(2, 5, 8, 15, "shirt"), _box(50, 50, 60, 60, "cup")],
                           [_rel(0, 1, "has"), _rel(2, 0, "on")])], CORPUS_SCHEMA)
    m = shared_triplet_mass(_train(), bench)
    # train relations: wearing x3, has, on (cup-table). predicates shared: has, on -> 2/5
    # category pairs shared: person-shirt x4 -> 4/5; triples shared: person-has-shirt -> 1/5
    assert m == pytest.approx({"pred": 0.4, "obj": 0.8, "triple": 0.2, "n_relations": 5.0})


def test_frequency_baseline_and_edge_accuracy():
    fb = fit_frequency_baseline(_train(), k=2)
    gt_t = to_table([
        _img("e1", [_box(0, 0, 10, 30, "person"), _box(2, 5, 8, 15, "shirt")], [_rel(0, 1, "wearing")]),
        _img("e2", [_box(0, 0, 10, 30, "person"), _box(2, 5, 8, 15, "shirt")], [_rel(0, 1, "has")]),
        _img("e3", [_box(0, 0, 10, 10, "dog"), _box(20, 0, 30, 10, "cat")], [_rel(0, 1, "on")]),
    ], CORPUS_SCHEMA)
    gt = load_ground_truth(gt_t)
    table = fb.predict(gt)
    rows = {r["image_id"]: r["triplets"] for r in table.to_pylist()}
    assert [(t["predicate"], round(t["score"], 3)) for t in rows["e1"]] == [("wearing", .75), ("has", .25)]
    # unseen category pair -> the marginal: wearing 3/5, then has / on at 1/5 (stable order)
    assert rows["e3"][0]["predicate"] == "wearing" and rows["e3"][0]["score"] == pytest.approx(.6)
    freq = load_predictions(table, gt)
    acc = edge_accuracy(gt, freq)
    assert acc["micro"] == pytest.approx(1 / 3) and acc["macro"] == pytest.approx(1 / 3)
    model = load_predictions(to_table([{"image_id": "e1", "triplets": [_tri(0, 1, "has", .9)]},
                                       {"image_id": "e2", "triplets": [_tri(0, 1, "has", .9)]},
                                       {"image_id": "e3", "triplets": [_tri(0, 1, "on", .4), _tri(1, 0, "under", .9)]}],
                                      PREDICTIONS_SCHEMA), gt)
    assert edge_accuracy(gt, model)["micro"] == pytest.approx(2 / 3)
    j = edge_join(gt, model, freq)
    assert j == pytest.approx({"only_a": 2 / 3, "only_b": 1 / 3, "both": 0.0, "neither": 0.0, "union": 1.0, "n_edges": 3.0})
    all_pairs = fb.predict(gt, pairs="all")
    assert sum(len(r) for r in all_pairs.column("triplets").to_pylist()) == 3 * 2 * 2


_VEC = {"on": [1, 0, 0], "on top of": [0.95, 0.1, 0], "resting on": [0.9, 0.2, 0.1],
        "near": [0, 1, 0], "next to": [0.1, 0.95, 0], "close to": [0.2, 0.9, 0.1], "under": [0, 0, 1]}


def _embed(strings):
    return np.array([_VEC[s] for s in strings], dtype=float)


def test_synonym_threshold_is_calibrated_and_space_bound():
    m = calibrate_synonym_threshold(_embed, {"on": ["on", "on top of", "resting on"], "near": ["near", "next to", "close to"],
                                             "under": ["under"]}, space="toy")
    assert 0.3 < m.threshold <= 0.99
    mm = m.match_matrix(_embed, ["on", "near", "under"], ["on top of", "close to"], space="toy")
    np.testing.assert_array_equal(mm, [[True, False], [False, True], [False, False]])
    with pytest.raises(ValueError, match="calibrated in space 'toy'"):
        m.match_matrix(_embed, ["on"], ["on"], space="minilm")
    with pytest.raises(ValueError, match="NaN"):
        SynonymMatcher(float("nan"), "toy").match_matrix(_embed, ["on"], ["on"], space="toy")


def test_open_vocab_recall_mrr_and_median_rank():
    gt = load_ground_truth(to_table([_img("A", [_box(0, 0, 5, 5), _box(10, 0, 15, 5), _box(20, 0, 25, 5)],
                                          [_rel(0, 1, "on top of"), _rel(1, 2, "near")])], CORPUS_SCHEMA))
    preds = load_predictions(to_table([{"image_id": "A", "triplets": [
        _tri(0, 1, "on", .9), _tri(0, 1, "on top of", .5), _tri(1, 2, "under", .8), _tri(1, 2, "next to", .7),
        _tri(1, 2, "near", .1)]}], PREDICTIONS_SCHEMA), gt)
    exact = evaluate_recall(gt, preds, ks=(2,))
    assert exact.metrics["R@2"] == 0.0
    m = SynonymMatcher(0.8, "toy").match_matrix(_embed, list(preds.vocab), list(gt.predicates), space="toy")
    r = evaluate_open_vocab(gt, preds, m, ks=(2,), vocabulary_size=7)
    assert r["mode"] == "graph_constrained" and r["metrics"]["R@2"] == 0.5  # 'on' ~ 'on top of'
    np.testing.assert_array_equal(rank_of_truth(gt, preds), [2, 3])
    assert r["metrics"]["MRR"] == pytest.approx((1 / 2 + 1 / 3) / 2)
    assert r["metrics"]["median_rank"] == 2.5


def test_prior_violation_check():
    gt = load_ground_truth(to_table([_img("A", [_box(0, 0, 10, 30, "person"), _box(2, 5, 8, 15, "shirt"),
                                                _box(60, 60, 70, 70, "hat")], [])], CORPUS_SCHEMA))
    preds = load_predictions(to_table([{"image_id": "A", "triplets": [
        _tri(0, 1, "wearing", .9), _tri(0, 2, "Wearing", .8), _tri(1, 2, "near", .7)]}], PREDICTIONS_SCHEMA), gt)
    train = _train()
    assert corpus_disjoint_rate(train, {"wearing"})["rate"] == 0.0
    r = prior_violation_check(train, gt, preds, {"wearing"})
    assert r["model_rate"] == 0.5 and r["data_rate"] == 0.0 and math.isnan(r["ratio"])
    r2 = prior_violation_check(train, gt, preds, {"wearing"}, top_k=1)
    assert r2["model_rate"] == 0.0 and r2["model_asserted"] == 1
