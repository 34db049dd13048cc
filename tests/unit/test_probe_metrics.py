"""Probe readout, per-axis aggregation, bootstrap intervals and paired tests."""

from __future__ import annotations

import numpy as np
import pytest

from relate.probe import (
    bootstrap_intervals, cosine_correct, mcnemar_exact, paired_test, permutation_pvalue,
    score_triplets,
)


def poporo_labels(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """POPORO's design: 400 triplets, CR 215 / TR 185 crossed with CD 170 / SD 230."""
    rng = np.random.default_rng(seed)
    rel = np.array(["CR"] * 215 + ["TR"] * 185)
    dis = rng.permutation(np.array(["CD"] * 170 + ["SD"] * 230))
    return rel, dis


@pytest.mark.parametrize("seed", range(5))
def test_overall_is_count_weighted_mean_of_either_axis(seed):
    rel, dis = poporo_labels(seed)
    rng = np.random.default_rng(100 + seed)
    correct = rng.random(400) < rng.uniform(0.3, 0.9)
    s = score_triplets(correct, rel, dis)
    assert (s.n, s.n_CR, s.n_TR, s.n_CD, s.n_SD) == (400, 215, 185, 170, 230)
    assert s.overall == pytest.approx(correct.mean(), abs=1e-15)
    assert s.overall == pytest.approx((215 * s.CR + 185 * s.TR) / 400, abs=1e-12)
    assert s.overall == pytest.approx((170 * s.CD + 230 * s.SD) / 400, abs=1e-12)
    assert s.gap_cr_tr == pytest.approx(s.CR - s.TR)
    assert s.gap_cd_sd == pytest.approx(s.CD - s.SD)
    # An unweighted mean of the two cells is not the overall accuracy in general.
    assert s.CR != s.TR


def test_cell_accuracies_match_direct_counts():
    rel = np.array(["CR", "CR", "TR", "TR", "TR"])
    dis = np.array(["CD", "SD", "SD", "SD", "CD"])
    correct = np.array([1, 0, 1, 1, 0], bool)
    s = score_triplets(correct, rel, dis)
    assert (s.CR, s.TR, s.CD, s.SD) == (0.5, pytest.approx(2 / 3), 0.5, pytest.approx(2 / 3))


def test_empty_cell_is_nan_and_bad_labels_are_named():
    s = score_triplets([True, False], ["CR", "CR"], ["CD", "SD"])
    assert np.isnan(s.TR) and np.isnan(s.gap_cr_tr)
    with pytest.raises(ValueError, match=r"relation_type.*'XX'.*CR"):
        score_triplets([True], ["XX"], ["CD"])
    with pytest.raises(ValueError, match="distractor_type"):
        score_triplets([True], ["CR"], ["cd"])
    with pytest.raises(ValueError, match="3 correctness values for 2"):
        score_triplets([True] * 3, ["CR", "TR"], ["CD", "SD"])


def test_cosine_readout_is_scale_invariant_and_ties_are_wrong():
    q = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 1.0]])
    t = np.array([[2.0, 0.1], [0.0, 1.0], [3.0, 0.0]])
    d = np.array([[0.0, 5.0], [5.0, 0.5], [0.0, 3.0]])
    assert cosine_correct(q, t, d).tolist() == [True, False, False]  # last one: exact tie
    assert cosine_correct(7 * q, 0.1 * t, 3 * d).tolist() == [True, False, False]
    with pytest.raises(ValueError, match="shape"):
        cosine_correct(q, t, d[:2])


def test_bootstrap_is_deterministic_under_a_seed():
    rel, dis = poporo_labels(0)
    correct = np.random.default_rng(1).random(400) < 0.7
    a = bootstrap_intervals(correct, rel, dis, n_boot=500, seed=3)
    b = bootstrap_intervals(correct, rel, dis, n_boot=500, seed=3)
    c = bootstrap_intervals(correct, rel, dis, n_boot=500, seed=4)
    assert a == b
    assert a != c
    point = score_triplets(correct, rel, dis)
    for k in ("overall", "CR", "TR", "CD", "SD", "gap_cr_tr", "gap_cd_sd"):
        assert a[k].low <= getattr(point, k) <= a[k].high, k
    assert a["overall"].high - a["overall"].low < a["TR"].high - a["TR"].low  # fewer triplets, wider


def test_bootstrap_covers_the_truth_at_the_nominal_rate():
    """Simulate a model whose per-cell accuracy is known; the 95% interval of the overall and
    the CR-TR gap should cover the truth in about 95% of repeated benchmarks."""
    rel, dis = poporo_labels(0)
    p = np.where(rel == "CR", 0.75, 0.6) + np.where(dis == "CD", 0.05, -0.05)
    truth_overall = p.mean()
    truth_gap = p[rel == "CR"].mean() - p[rel == "TR"].mean()
    rng = np.random.default_rng(7)
    reps, hit_o, hit_g = 300, 0, 0
    for r in range(reps):
        correct = rng.random(400) < p
        iv = bootstrap_intervals(correct, rel, dis, n_boot=400, seed=r)
        hit_o += iv["overall"].low <= truth_overall <= iv["overall"].high
        hit_g += iv["gap_cr_tr"].low <= truth_gap <= iv["gap_cr_tr"].high
    # Binomial sd of the coverage estimate at 300 reps is ~1.3 points.
    assert 0.90 <= hit_o / reps <= 0.985
    assert 0.90 <= hit_g / reps <= 0.985


def test_bootstrap_rejects_bad_settings():
    with pytest.raises(ValueError, match="level"):
        bootstrap_intervals([True, False], ["CR", "TR"], ["CD", "SD"], level=1.5)
    with pytest.raises(ValueError, match="n_boot"):
        bootstrap_intervals([True, False], ["CR", "TR"], ["CD", "SD"], n_boot=2)


def test_paired_tests_on_identical_and_different_models():
    rng = np.random.default_rng(0)
    a = rng.random(400) < 0.8
    same = paired_test("a", a, "a2", a.copy())
    assert (same.a_only, same.b_only, same.p_mcnemar, same.p_permutation) == (0, 0, 1.0, 1.0)
    b = a.copy()
    flip = np.flatnonzero(a)[:60]
    b[flip] = False  # b loses 60 triplets a gets right and gains none
    t = paired_test("a", a, "b", b, n_perm=2000, seed=1)
    assert (t.a_only, t.b_only) == (60, 0)
    assert t.diff == pytest.approx(60 / 400)
    assert t.p_mcnemar < 1e-10 and t.p_permutation < 0.01
    # A balanced disagreement is not significant.
    c = a.copy()
    c[np.flatnonzero(a)[:20]] = False
    c[np.flatnonzero(~a)[:20]] = True
    assert mcnemar_exact(a, c) == (20, 20, 1.0)
    assert permutation_pvalue(a, c, 2000, seed=0) > 0.5
    assert permutation_pvalue(a, b, 500, seed=9) == permutation_pvalue(a, b, 500, seed=9)
    with pytest.raises(ValueError, match="different triplet counts"):
        paired_test("a", a, "b", b[:10])
