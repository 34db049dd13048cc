"""Platt (recovers a known map; agrees with sklearn's sigmoid calibration) and ECE by hand."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.calibration import CalibratedClassifierCV
from sklearn.linear_model import LogisticRegression

from relate.metrics import PlattParams, apply_platt, expected_calibration_error, fit_platt, platt_out_of_fold
from relate.metrics.calibration import logit, reliability_bins


def test_platt_recovers_generating_parameters():
    rng = np.random.default_rng(0)
    x = rng.normal(0, 2, 20000)
    y = rng.random(x.size) < 1 / (1 + np.exp(-(0.7 * x - 1.5)))
    p = fit_platt(x, y)
    assert p.a == pytest.approx(0.7, abs=0.05) and p.b == pytest.approx(-1.5, abs=0.08)
    probs = apply_platt(x, p)
    assert np.all(np.diff(probs[np.argsort(x)]) >= 0)  # monotone: rankings unchanged
    assert expected_calibration_error(probs, y) < 0.02
    raw = 1 / (1 + np.exp(-(3 * x + 2)))  # over-confident raw scores
    assert expected_calibration_error(raw, y) > 0.1


def test_platt_matches_sklearn_sigmoid_calibration():
    rng = np.random.default_rng(1)
    x = rng.normal(0, 1, (4000, 1))
    y = (x[:, 0] + rng.normal(0, 1, 4000)) > 0.5
    ours = apply_platt(x[:, 0], fit_platt(x[:, 0], y))
    ref = LogisticRegression(C=np.inf).fit(x, y).predict_proba(x)[:, 1]
    np.testing.assert_allclose(ours, ref, atol=1e-4)
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
    assert not PlattParams().calibrated
    with pytest.raises(ValueError, match="NaN"):
        apply_platt(np.zeros(3), PlattParams())
    with pytest.raises(ValueError, match="both"):
        fit_platt(np.zeros(4), np.ones(4))


def test_out_of_fold_probabilities_are_honest():
    rng = np.random.default_rng(2)
    s = rng.random(3000)
    y = rng.random(3000) < s ** 2
    oof = platt_out_of_fold(logit(s), y, folds=5)
    assert oof.shape == s.shape and np.all((oof > 0) & (oof < 1))
    assert expected_calibration_error(oof, y) < expected_calibration_error(s, y)
