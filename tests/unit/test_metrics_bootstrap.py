"""Bootstrap over images (relate/metrics/bootstrap.py) checked against scipy.stats.bootstrap, a
hand-enumerated 3-image case, degenerate cells and the existing per-image aggregation."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from relate.metrics.bootstrap import (_stats, adjust_p_bh, bootstrap_cell, bootstrap_p_value, cell_rows, format_p,
                                      paired_bootstrap, resample_weights)
from relate.metrics.per_image import aggregate_per_image


def _rows(recalls, k=50, ids=None, preds=None):
    """Per-image rows with n_gt=10 (hits = recall * 10), one or more predicate terms each."""
    rng = np.random.default_rng(0)
    out = []
    for i, r in enumerate(recalls):
        hits = int(round(10 * r))
        terms = preds[i] if preds is not None else [{"predicate": "on", "hits": hits, "n_gt": 10}]
        out.append({"image_id": ids[i] if ids else f"img{i}", "k": k, "n_gt": 10, "hits": hits,
                    "recall": hits / 10, "predicates": terms})
    rng.shuffle(out)
    return out


def _random_rows(n, seed):
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        ps = rng.choice(["on", "has", "near", "holding", "riding"], size=rng.integers(1, 4), replace=False)
        terms = [{"predicate": str(p), "hits": int(h), "n_gt": int(g)}
                 for p, g in zip(ps, rng.integers(1, 5, size=ps.size)) for h in [rng.integers(0, g + 1)]]
        hits, n_gt = sum(t["hits"] for t in terms), sum(t["n_gt"] for t in terms)
        rows.append({"image_id": f"img{i}", "k": 50, "n_gt": n_gt, "hits": hits, "recall": hits / n_gt,
                     "predicates": terms})
    return rows


def test_interval_of_mean_agrees_with_scipy_percentile():
    x = np.random.default_rng(3).integers(0, 11, size=60) / 10
    cell = cell_rows(_rows(x), 50)
    ours = bootstrap_cell(cell, resamples=20000, seed=1).recall
    ref = stats.bootstrap((x,), np.mean, n_resamples=20000, method="percentile", confidence_level=0.95,
                          random_state=2).confidence_interval
    assert ours.estimate == pytest.approx(x.mean())
    assert ours.low == pytest.approx(ref.low, abs=0.006)
    assert ours.high == pytest.approx(ref.high, abs=0.006)


def test_paired_difference_agrees_with_scipy_paired_percentile():
    rng = np.random.default_rng(4)
    a = rng.integers(0, 11, size=50) / 10
    b = np.clip(a - rng.integers(-2, 4, size=50) / 10, 0, 1)
    d = paired_bootstrap(cell_rows(_rows(a), 50), cell_rows(_rows(b), 50), resamples=20000, seed=1).recall
    ref = stats.bootstrap((a, b), lambda u, v, axis: np.mean(u - v, axis=axis), paired=True, vectorized=True,
                          n_resamples=20000, method="percentile", random_state=2).confidence_interval
    assert d.estimate == pytest.approx(a.mean() - b.mean())
    assert d.low == pytest.approx(ref.low, abs=0.006)
    assert d.high == pytest.approx(ref.high, abs=0.006)


def test_three_images_match_the_exhaustive_bootstrap():
    # recall 0, .5, 1: of the 27 equally likely ordered resamples, 1 has mean 0, 1 has mean 1 and 7
    # have mean .5 ({0,.5,1} in 6 orders, {.5,.5,.5}); both tails (1/27 = 3.7%) exceed 2.5%, so the
    # 95% percentile interval is exactly [0, 1].
    cell = cell_rows(_rows([0.0, 0.5, 1.0]), 50)
    w = resample_weights(3, 54000, seed=0)
    R, _ = _stats(cell, w)
    for value, count in ((0.0, 1), (0.5, 7), (1.0, 1)):
        assert np.mean(np.isclose(R, value)) == pytest.approx(count / 27, abs=0.005)
    iv = bootstrap_cell(cell, resamples=54000, seed=0).recall
    assert (iv.estimate, iv.low, iv.high) == (0.5, 0.0, 1.0)


def test_identical_images_collapse_the_interval_to_a_point():
    terms = [[{"predicate": "on", "hits": 2, "n_gt": 2}, {"predicate": "has", "hits": 0, "n_gt": 2}]] * 5
    rows = [{"image_id": f"i{j}", "k": 20, "n_gt": 4, "hits": 2, "recall": 0.5, "predicates": t}
            for j, t in enumerate(terms)]
    b = bootstrap_cell(cell_rows(rows, 20), resamples=500)
    assert (b.recall.estimate, b.recall.low, b.recall.high) == (0.5, 0.5, 0.5)
    assert (b.mean_recall.estimate, b.mean_recall.low, b.mean_recall.high) == (0.5, 0.5, 0.5)


def test_resampled_statistics_equal_aggregate_per_image_on_the_drawn_rows():
    rows = _random_rows(25, seed=7)
    cell = cell_rows(rows, 50)
    point = bootstrap_cell(cell, resamples=10)
    ref = aggregate_per_image(rows, 50)
    assert point.recall.estimate == pytest.approx(ref["R@50"])
    assert point.mean_recall.estimate == pytest.approx(ref["mR@50"])
    by_id = {r["image_id"]: r for r in rows}
    w = resample_weights(cell.n_images, 20, seed=5)
    R, mR = _stats(cell, w)
    for b in range(20):  # a resample is the row list with each image repeated as often as drawn
        drawn = [by_id[i] for i, c in zip(cell.image_ids, w[b].astype(int)) for _ in range(c)]
        ref = aggregate_per_image(drawn, 50)
        assert R[b] == pytest.approx(ref["R@50"]) and mR[b] == pytest.approx(ref["mR@50"])


def test_identical_systems_differ_by_exactly_zero():
    rows = _random_rows(30, seed=1)
    d = paired_bootstrap(cell_rows(rows, 50), cell_rows(list(reversed(rows)), 50), resamples=500)
    for x in (d.recall, d.mean_recall):
        assert (x.estimate, x.low, x.high, x.p_value, x.significant) == (0.0, 0.0, 0.0, 1.0, False)


def test_a_system_better_on_every_image_is_significant():
    base = np.random.default_rng(2).integers(0, 8, size=40) / 10
    better, worse = cell_rows(_rows(base + 0.2), 50), cell_rows(_rows(base), 50)
    d = paired_bootstrap(better, worse, resamples=2000)
    assert d.recall.estimate == pytest.approx(0.2)
    # no resample crosses zero: p is never 0, it is the bound 2/B and says so
    assert (d.recall.p_value, d.recall.p_bound, d.recall.p_text) == (0.001, True, "< 0.001")
    assert d.recall.significant and d.recall.low > 0
    r = paired_bootstrap(worse, better, resamples=2000).recall
    assert (r.p_value, r.p_bound) == (0.001, True) and r.high < 0


def test_bootstrap_p_value_hand_worked():
    # two of eight draws at or below zero for a positive estimate: twice 2/8
    assert bootstrap_p_value(0.3, np.array([-0.1, 0.0, 0.2, 0.3, 0.4, 0.5, 0.6, np.nan, 0.7])) == (0.5, False)
    # a negative estimate counts the draws at or above zero; NaN draws are not resamples
    assert bootstrap_p_value(-0.2, np.array([-0.3, -0.2, 0.1, np.nan])) == (2 / 3, False)
    assert bootstrap_p_value(0.2, np.array([0.1, 0.3, 0.2, 0.5])) == (0.5, True)  # none crosses: below 2/4
    assert bootstrap_p_value(0.0, np.array([0.1, -0.1])) == (1.0, False)
    assert bootstrap_p_value(0.1, np.array([-1.0, -2.0, 0.5])) == (1.0, False)  # capped at 1
    assert (format_p(0.5, False), format_p(2e-5, True)) == ("0.500", "< 2e-05")


def test_benjamini_hochberg_hand_worked():
    # sorted 0.01 0.03 0.04 0.20 (m = 4): p * m / rank = 0.04, 0.06, 0.0533, 0.2, then the running
    # minimum from the top: 0.04, 0.0533, 0.0533, 0.2; the NaN is no test and stays NaN
    q = adjust_p_bh([0.01, 0.04, np.nan, 0.03, 0.20])
    assert q[[0, 1, 3, 4]] == pytest.approx([0.04, 0.04 * 4 / 3, 0.04 * 4 / 3, 0.2]) and np.isnan(q[2])


def test_pairing_uses_only_shared_images_in_one_order():
    a = cell_rows(_rows([1.0, 0.0, 0.5], ids=["x", "y", "z"]), 50)
    b = cell_rows(_rows([0.5, 0.0, 1.0, 0.3], ids=["z", "y", "x", "extra"]), 50)
    d = paired_bootstrap(a, b, resamples=200)
    assert d.n_images == 3 and d.recall.estimate == 0.0 and d.recall.p_value == 1.0
    with pytest.raises(ValueError, match="share no image_id"):
        paired_bootstrap(a, cell_rows(_rows([0.1], ids=["other"]), 50))


def test_duplicate_images_are_refused():
    rows = _rows([0.1, 0.2], ids=["same", "same"])
    with pytest.raises(ValueError, match="more than once"):
        cell_rows(rows, 50)
