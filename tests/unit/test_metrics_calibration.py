"""Platt (recovers a known map; agrees with scikit-learn for both target variants) and ECE by hand."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.calibration import CalibratedClassifierCV
from sklearn.linear_model import LogisticRegression

from relate.metrics import Calibration, apply_platt, expected_calibration_error, fit_platt, platt_out_of_fold
from relate.metrics.calibration import logit, reliability_bins


def test_platt_recovers_generating_parameters():
    rng = np.random.default_rng(0)
    x = rng.normal(0, 2, 20000)
    y = rng.random(x.size) < 1 / (1 + np.exp(-(0.7 * x - 1.5)))
    for targets in ("platt", "hard"):
        p = fit_platt(x, y, targets=targets)
        assert p.a == pytest.approx(0.7, abs=0.05) and p.b == pytest.approx(-1.5, abs=0.08), targets
    probs = apply_platt(x, p)
    assert np.all(np.diff(probs[np.argsort(x)]) >= 0)  # monotone: rankings unchanged
    assert expected_calibration_error(probs, y) < 0.02
    raw = 1 / (1 + np.exp(-(3 * x + 2)))  # over-confident raw scores
    assert expected_calibration_error(raw, y) > 0.1


def test_hard_targets_match_unregularised_logistic_regression():
    rng = np.random.default_rng(1)
    x = rng.normal(0, 3, (4000, 1))
    y = (x[:, 0] + rng.normal(0, 3, 4000)) > 2.0
    ours = fit_platt(x[:, 0], y, targets="hard")
    lr = LogisticRegression(C=np.inf, tol=1e-10, max_iter=10_000).fit(x, y)
    assert ours.a == pytest.approx(lr.coef_[0, 0], abs=1e-5) and ours.b == pytest.approx(lr.intercept_[0], abs=1e-5)


def test_platt_targets_match_sklearn_platt_fit():
    """Platt's smoothed targets t+ = (N+ + 1) / (N+ + 2), t- = 1 / (N- + 2): a logistic regression on
    every item twice, as a positive with weight t and a negative with weight 1 - t, and scikit-learn's
    own Platt fit behind CalibratedClassifierCV(method="sigmoid") give the same (a, b)."""
    rng = np.random.default_rng(3)
    x = rng.normal(0, 2, 300)
    y = rng.random(300) < 1 / (1 + np.exp(-(1.3 * x - 2.0)))
    ours = fit_platt(x, y)
    npos, nneg = y.sum(), (~y).sum()
    t = np.where(y, (npos + 1) / (npos + 2), 1 / (nneg + 2))
    lr = LogisticRegression(C=np.inf, tol=1e-10, max_iter=10_000).fit(
        np.r_[x, x][:, None], np.r_[np.ones(300), np.zeros(300)], sample_weight=np.r_[t, 1 - t])
    assert ours.a == pytest.approx(lr.coef_[0, 0], abs=1e-5) and ours.b == pytest.approx(lr.intercept_[0], abs=1e-5)
    hard = fit_platt(x, y, targets="hard")
    assert abs(hard.a - ours.a) > 1e-4  # on 300 items the two variants are distinguishable
    # an independent implementation (scipy's minimiser on Platt's own objective); private: p = 1 / (1 + exp(A f + B))
    from sklearn.calibration import _sigmoid_calibration

    A, B = _sigmoid_calibration(x, y)
    assert ours.a == pytest.approx(-A, abs=1e-4) and ours.b == pytest.approx(-B, abs=1e-4)


def test_separable_labels():
    x = np.r_[np.linspace(-3, -1, 50), np.linspace(1, 3, 50)]
    y = x > 0
    with pytest.raises(ValueError, match="separates"):
        fit_platt(x, y, targets="hard")
    p = fit_platt(x, y)  # smoothed targets keep the fit finite
    assert p.fitted and 0 < p.a < 10 and abs(p.b) < 1e-6  # symmetric data: b = 0


def test_platt_agrees_with_sklearn_sigmoid_calibration():
    rng = np.random.default_rng(1)
    x = rng.normal(0, 1, (4000, 1))
    y = (x[:, 0] + rng.normal(0, 1, 4000)) > 0.5
    ours = apply_platt(x[:, 0], fit_platt(x[:, 0], y))
    cal = CalibratedClassifierCV(LogisticRegression(), method="sigmoid", cv=5).fit(x, y)
    assert np.abs(cal.predict_proba(x)[:, 1] - ours).max() < 0.05


def test_ece_hand_computed_and_bins():
    probs = np.array([0.1, 0.1, 0.9, 0.9])
    y = np.array([0, 1, 1, 1])
    assert expected_calibration_error(probs, y, n_bins=10) == pytest.approx(0.5 * 0.4 + 0.5 * 0.1)
    r = reliability_bins(probs, y, 10)
    assert r["count"][1] == 2 and r["count"][9] == 2 and r["accuracy"][1] == 0.5
    assert expected_calibration_error(np.array([1.0]), np.array([1])) == 0.0


def test_uncalibrated_is_nan_and_refuses_to_apply():
    assert not Calibration().fitted and Calibration(0.5, -1.0).fitted
    assert Calibration.from_dict(Calibration(0.5, -1.0).to_dict()) == Calibration(0.5, -1.0)
    with pytest.raises(ValueError, match="NaN"):
        apply_platt(np.zeros(3), Calibration())
    with pytest.raises(ValueError, match="both"):
        fit_platt(np.zeros(4), np.ones(4))


def test_out_of_fold_probabilities_are_honest():
    rng = np.random.default_rng(2)
    s = rng.random(3000)
    y = rng.random(3000) < s ** 2
    oof = platt_out_of_fold(logit(s), y, folds=5)
    assert oof.shape == s.shape and np.all((oof > 0) & (oof < 1))
    assert expected_calibration_error(oof, y) < expected_calibration_error(s, y)
