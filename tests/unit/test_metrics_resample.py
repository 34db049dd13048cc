"""relate.metrics.resample against outside references: every statistic under a draw of image
counts equals (a) scikit-learn's weighted average precision / ROC-AUC with the counts as sample
weights, and (b) our evaluator run on the physically resampled benchmark, each drawn image copied
as often as it was drawn."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import average_precision_score, roc_auc_score

from relate.metrics import evaluate_recall, load_detections, load_ground_truth, load_predictions, pair_recall_ceiling
from relate.metrics.bootstrap import resample_weights
from relate.metrics.pairs import relations_covered
from relate.metrics.resample import (CeilingKit, LabelledKit, RecallKit, ap_draws, auc_draws, ceiling_draws,
                                     percentile_interval, prevalence_draws, recall_draws)
from relate.schema import CORPUS_SCHEMA, IMAGE_SCHEMA, PREDICTIONS_SCHEMA, to_table

PREDS = ("on", "near", "holding", "under")


def _box(x: float) -> dict:
    return {"x1": x, "y1": 0.0, "x2": x + 10.0, "y2": 10.0, "category": "thing", "is_person": False,
            "is_body_part": False}


def _world(seed: int = 0, n: int = 7):
    """n images with 3-4 boxes, random relations over PREDS and random scored predictions."""
    rng = np.random.default_rng(seed)
    corpus, preds, dets = [], [], []
    for i in range(n):
        nb = int(rng.integers(3, 5))
        boxes = [_box(20.0 * j) for j in range(nb)]
        rels = []
        for _ in range(0 if i == 0 else int(rng.integers(1, 5))):  # image 0 has no relation
            s, o = rng.choice(nb, 2, replace=False)
            rels.append({"subject": int(s), "object": int(o), "predicate": str(rng.choice(PREDS, p=[.5, .3, .15, .05])),
                         "pass": "human", "gate": "kept", "score": None})
        trip = [{"subject": int(s), "object": int(o), "predicate": p, "score": float(rng.random() * 0.8),
                 "spatial_score": None, "semantic_score": None}
                for s in range(nb) for o in range(nb) if s != o for p in rng.choice(PREDS, 2, replace=False)]
        trip += [{**{k: r[k] for k in ("subject", "object", "predicate")}, "score": float(0.5 + 0.5 * rng.random()),
                  "spatial_score": None, "semantic_score": None} for r in rels if rng.random() < 0.6]
        corpus.append({"image_id": f"im{i}", "uri": "u", "width": 100, "height": 20, "source": "t", "split": "test",
                       "boxes": boxes, "relations": rels})
        preds.append({"image_id": f"im{i}", "triplets": trip})
        dets.append({**{k: v for k, v in corpus[-1].items() if k != "relations"},
                     "boxes": [_box(20.0 * j + (0 if rng.random() < .7 else 6)) for j in range(nb)]})
    return corpus, preds, dets


def _copied(rows: list[dict], counts: np.ndarray) -> list[dict]:
    """Each row repeated as often as drawn, each copy a distinct image."""
    return [{**r, "image_id": f"{r['image_id']}#{c}"} for r, n in zip(rows, counts) for c in range(int(n))]


def _recall_kit(gt, preds, k, **kw):
    r = evaluate_recall(gt, preds, ks=(k,), per_image=True, **kw)
    return RecallKit.from_rows(r.per_image, gt.index_of(), k), r


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_recall_draws_equal_the_evaluator_on_the_copied_benchmark(seed):
    corpus, preds, _ = _world(seed)
    gt = load_ground_truth(to_table(corpus, CORPUS_SCHEMA))
    p = load_predictions(to_table(preds, PREDICTIONS_SCHEMA), gt)
    kit, point = _recall_kit(gt, p, 3)
    ones = recall_draws(kit, np.ones((1, gt.n_images)))
    assert 0 < point.metrics["R@3"] < 1 and 0 < point.metrics["mR@3"] < 1  # a world with hits and misses
    for name in ("R", "mR", "F1", "wR"):
        assert ones[name][0] == pytest.approx(point.metrics[f"{name}@3"], abs=1e-12), name
    W = resample_weights(gt.n_images, 6, seed)
    draws = recall_draws(kit, W)
    for b in range(W.shape[0]):
        gt_b = load_ground_truth(to_table(_copied(corpus, W[b]), CORPUS_SCHEMA))
        ref = evaluate_recall(gt_b, load_predictions(to_table(_copied(preds, W[b]), PREDICTIONS_SCHEMA), gt_b),
                              ks=(3,)).metrics
        for name in ("R", "mR", "F1", "wR"):
            want = ref[f"{name}@3"]
            got = draws[name][b]
            assert (np.isnan(got) and np.isnan(want)) or got == pytest.approx(want, abs=1e-12), (b, name)


def test_ceiling_draws_equal_the_ceiling_of_the_copied_benchmark():
    corpus, _, dets = _world(4)
    gt = load_ground_truth(to_table(corpus, CORPUS_SCHEMA))
    det = load_detections(to_table(dets, IMAGE_SCHEMA), gt)
    rel, cov = relations_covered(gt, det)
    assert cov.sum() / rel.sum() == pytest.approx(pair_recall_ceiling(gt, det)["ceiling"])
    kit = CeilingKit(np.flatnonzero(rel), rel[rel > 0], cov[rel > 0])
    W = resample_weights(gt.n_images, 5, 1)
    got = ceiling_draws(kit, W)
    for b in range(W.shape[0]):
        gt_b = load_ground_truth(to_table(_copied(corpus, W[b]), CORPUS_SCHEMA))
        det_b = load_detections(to_table(_copied(dets, W[b]), IMAGE_SCHEMA), gt_b)
        assert got[b] == pytest.approx(pair_recall_ceiling(gt_b, det_b)["ceiling"], abs=1e-12)


def _labelled(seed: int, m: int = 60, n_img: int = 8) -> LabelledKit:
    rng = np.random.default_rng(seed)
    label = rng.random(m) < 0.4
    score = np.round(rng.random(m) + 0.3 * label, 1)  # rounded: many tied scores
    return LabelledKit(rng.integers(0, n_img, m), rng.integers(0, 3, m), label, score, ("a", "b", "c"))


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_weighted_ap_and_auc_match_scikit_learn_draw_by_draw(seed):
    kit = _labelled(seed)
    W = resample_weights(8, 12, seed)
    ap, auc = ap_draws(kit, W, [0, 1, 2]), auc_draws(kit, W, [0, 1, 2])
    prev = prevalence_draws(kit, W)
    checked = 0
    for b in range(W.shape[0]):
        w = W[b, kit.image]
        assert prev[b] == pytest.approx((w * kit.label).sum() / w.sum())
        for c in range(3):
            m = (kit.predicate == c) & (w > 0)
            y, s = kit.label[m], kit.score[m]
            if 0 < y.sum() < y.size:
                assert ap[b, c] == pytest.approx(average_precision_score(y, s, sample_weight=w[m]), abs=1e-12)
                assert auc[b, c] == pytest.approx(roc_auc_score(y, s, sample_weight=w[m]), abs=1e-12)
                checked += 1
            elif not y.any():
                assert np.isnan(ap[b, c]) and np.isnan(auc[b, c])
    assert checked >= 20


def test_ties_are_credited_as_scikit_learn_credits_them():
    # one positive tied with one negative at the top, one negative below: AP 1/2, AUC (1/2 + 1) / 2
    kit = LabelledKit(np.array([0, 1, 2]), np.zeros(3, np.int64), np.array([True, False, False]),
                      np.array([0.9, 0.9, 0.1]), ("a",))
    one = np.ones((1, 3))
    assert ap_draws(kit, one, [0])[0, 0] == pytest.approx(0.5)
    assert auc_draws(kit, one, [0])[0, 0] == pytest.approx(0.75)
    # drawing the tied negative twice: precision at the tie 1/3, the negatives' mass splits 2:1
    two = np.array([[1.0, 2.0, 1.0]])
    assert ap_draws(kit, two, [0])[0, 0] == pytest.approx(1 / 3)
    assert auc_draws(kit, two, [0])[0, 0] == pytest.approx((2 / 3) * 0.5 + 1 / 3)


def test_percentile_interval_ignores_nan_draws_and_says_when_none_is_finite():
    lo, hi = percentile_interval(np.r_[np.arange(101.0), np.nan], 0.9)
    assert (lo, hi) == pytest.approx((5.0, 95.0))
    assert all(np.isnan(percentile_interval(np.full(3, np.nan))))


def test_kit_rows_outside_the_benchmark_or_twice_are_refused():
    row = {"image_id": "x", "k": 5, "recall": 1.0, "predicates": [{"predicate": "on", "hits": 1, "n_gt": 1}]}
    with pytest.raises(ValueError, match="outside the benchmark"):
        RecallKit.from_rows([row], {"y": 0}, 5)
    with pytest.raises(ValueError, match="more than once"):
        RecallKit.from_rows([row, row], {"x": 0}, 5)


def test_one_predicate_drawn_weights_it_uniformly_as_the_evaluator_does():
    # log(N / n_c) is 0 when one predicate holds every relation; wR then falls back to its recall
    rows = [{"image_id": f"i{j}", "k": 5, "recall": r, "predicates": [{"predicate": "on", "hits": h, "n_gt": 2}]}
            for j, (r, h) in enumerate([(0.5, 1), (1.0, 2)])]
    d = recall_draws(RecallKit.from_rows(rows, {"i0": 0, "i1": 1}, 5), np.array([[1.0, 1.0], [3.0, 0.0]]))
    assert d["wR"] == pytest.approx([0.75, 0.5]) and d["mR"] == pytest.approx([0.75, 0.5])
