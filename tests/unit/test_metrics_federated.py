"""A2 (fAP, P-AUC, pair coverage) and A6 (macro / pooled AUC): hand-computed cases and agreement
with scikit-learn on random inputs."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from sklearn.metrics import average_precision_score, roc_auc_score

from relate.data.readers.base import CELLS_SCHEMA
from relate.metrics import evaluate_federated, evaluate_spatial, load_cells, load_ground_truth, load_predictions
from relate.metrics.federated import federated_scores, score_cells
from relate.schema import CORPUS_SCHEMA, PREDICTIONS_SCHEMA, SchemaError, to_table


def _box(i):
    return {"x1": i * 10.0, "y1": 0.0, "x2": i * 10.0 + 8, "y2": 8.0, "category": None, "is_person": False,
            "is_body_part": False}


def _gt(n_img, nb=3):
    return load_ground_truth(to_table([{"image_id": f"i{k}", "uri": "u", "width": 100, "height": 100, "source": "t",
                                        "split": "test", "boxes": [_box(j) for j in range(nb)], "relations": []}
                                       for k in range(n_img)], CORPUS_SCHEMA))


def _cell(s, o, p, y):
    return {"subject": s, "object": o, "predicate": p, "label": y}


def _tri(s, o, p, score):
    return {"subject": s, "object": o, "predicate": p, "score": score, "spatial_score": None, "semantic_score": None}


def test_federated_hand_computed():
    gt = _gt(1)
    cells = load_cells(to_table([{"image_id": "i0", "cells": [
        _cell(0, 1, "on", True), _cell(1, 0, "on", False), _cell(0, 2, "on", False),
        _cell(1, 2, "near", True), _cell(2, 1, "near", False)]}], CELLS_SCHEMA), gt)
    preds = load_predictions(to_table([{"image_id": "i0", "triplets": [
        _tri(0, 1, "on", .9), _tri(1, 0, "on", .2), _tri(1, 2, "near", .1), _tri(2, 1, "near", .5),
        _tri(2, 1, "behind", .99)]}], PREDICTIONS_SCHEMA), gt)
    score, covered = score_cells(cells, preds)
    np.testing.assert_allclose(score, [.9, .2, 0.0, .1, .5])  # (0, 2) never scored -> 0
    np.testing.assert_array_equal(covered, [True, True, False, True, True])
    r = evaluate_federated(cells, preds, min_support=1)
    assert r["per_predicate_ap"] == pytest.approx({"on": 1.0, "near": 0.5})
    assert r["per_predicate_auc"] == pytest.approx({"on": 1.0, "near": 0.0})
    assert r["fAP"] == pytest.approx(.75) and r["P-AUC"] == pytest.approx(.5)
    assert r["pair_coverage"] == pytest.approx(.8) and r["prevalence"] == pytest.approx(.4)
    assert r["fAP_rare"] == pytest.approx(.75) and r["n_rare"] == 2
    assert np.isnan(evaluate_federated(cells, preds, min_support=5)["fAP"])  # support filter


def test_federated_and_spatial_agree_with_sklearn_on_random_inputs():
    rng = np.random.default_rng(1)
    n_img, nb = 30, 4
    gt = _gt(n_img, nb)
    vocab = ["on", "near", "above", "below"]
    cell_rows, pred_rows, flat = [], [], []
    for k in range(n_img):
        cs, ts = [], []
        for s in range(nb):
            for o in range(nb):
                if s == o:
                    continue
                for p in vocab:
                    if rng.random() < 0.4:
                        y = bool(rng.random() < 0.3)
                        sc = float(rng.random()) if rng.random() < 0.9 else None
                        cs.append(_cell(s, o, p, y))
                        if sc is not None:
                            ts.append(_tri(s, o, p, sc))
                        flat.append((p, y, 0.0 if sc is None else sc))
        cell_rows.append({"image_id": f"i{k}", "cells": cs})
        pred_rows.append({"image_id": f"i{k}", "triplets": ts})
    cells = load_cells(to_table(cell_rows, CELLS_SCHEMA), gt)
    preds = load_predictions(to_table(pred_rows, PREDICTIONS_SCHEMA), gt)
    fed = evaluate_federated(cells, preds, min_support=1)
    spa = evaluate_spatial(cells, preds)
    names = np.array([f[0] for f in flat])
    y = np.array([f[1] for f in flat])
    s = np.array([f[2] for f in flat])
    for p in vocab:
        m = names == p
        assert fed["per_predicate_ap"][p] == pytest.approx(average_precision_score(y[m], s[m]))
        assert spa["per_predicate"][p] == pytest.approx(roc_auc_score(y[m], s[m]))
    assert spa["pooled_auc"] == pytest.approx(roc_auc_score(y, s))
    assert spa["macro_auc"] == pytest.approx(np.mean([roc_auc_score(y[names == p], s[names == p]) for p in vocab]))
    assert fed["prevalence"] == pytest.approx(y.mean())


def test_spatial_hand_computed_and_rank_based_auc():
    gt = _gt(1)
    cells = load_cells(to_table([{"image_id": "i0", "cells": [
        _cell(0, 1, "above", True), _cell(1, 0, "above", False), _cell(0, 2, "above", True), _cell(2, 0, "above", False),
        _cell(1, 2, "left of", True), _cell(2, 1, "left of", False)]}], CELLS_SCHEMA), gt)
    preds = load_predictions(to_table([{"image_id": "i0", "triplets": [
        _tri(0, 1, "above", .8), _tri(1, 0, "above", .6), _tri(0, 2, "above", .4), _tri(2, 0, "above", .2),
        _tri(1, 2, "left of", .3), _tri(2, 1, "left of", .7)]}], PREDICTIONS_SCHEMA), gt)
    r = evaluate_spatial(cells, preds)
    # above: positives {.8, .4} vs negatives {.6, .2}: 3 of 4 pairs ordered -> 0.75; left of: 0
    assert r["per_predicate"] == pytest.approx({"above": .75, "left of": 0.0})
    assert r["macro_auc"] == pytest.approx(.375)
    # pooled: pos {.8,.4,.3} vs neg {.6,.2,.7}: wins 1+1 + 1 + 0 + 1 + 0 + 1 ... counted: 5/9
    assert r["pooled_auc"] == pytest.approx(5 / 9)


def test_cells_with_unknown_images_or_out_of_range_fail():
    gt = _gt(1)
    with pytest.raises(SchemaError, match="not in the ground truth"):
        load_cells(to_table([{"image_id": "zz", "cells": []}], CELLS_SCHEMA), gt)
    with pytest.raises(SchemaError, match="missing column"):
        load_cells(pa.table({"image_id": ["i0"]}), gt)


def test_federated_scores_needs_both_classes():
    gt = _gt(1)
    cells = load_cells(to_table([{"image_id": "i0", "cells": [_cell(0, 1, "on", True)]}], CELLS_SCHEMA), gt)
    out = federated_scores(cells, np.array([0.5]), np.array([True]), min_support=1)
    assert out["per_predicate_ap"] == {} and np.isnan(out["fAP"])
