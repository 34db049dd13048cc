"""Platt calibration and expected calibration error (seed 001, D.4, Eq. 6).

Raw scores are trained against a balanced prior and pile up near 1, so a threshold means nothing
until two parameters (a, b) map the logit to a probability: p = sigmoid(a * logit + b). The map
is monotone, so every ranking metric is unchanged. An uncalibrated model stores NaN, never a
borrowed (a, b): thresholds do not transfer between checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["PlattParams", "logit", "fit_platt", "apply_platt", "platt_out_of_fold",
           "expected_calibration_error", "reliability_bins"]


@dataclass(frozen=True)
class PlattParams:
    a: float = float("nan")
    b: float = float("nan")

    @property
    def calibrated(self) -> bool:
        return bool(np.isfinite(self.a) and np.isfinite(self.b))


def logit(p: np.ndarray, eps: float = 1e-7) -> np.ndarray:
    p = np.clip(np.asarray(p, dtype=np.float64), eps, 1 - eps)
    return np.log(p) - np.log1p(-p)


def fit_platt(logits: np.ndarray, labels: np.ndarray) -> PlattParams:
    """Unregularised 1-D logistic regression of the labels on the logits."""
    x = np.asarray(logits, dtype=np.float64).reshape(-1, 1)
    y = np.asarray(labels).astype(int).reshape(-1)
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"logits ({x.shape[0]}) and labels ({y.shape[0]}) differ in length")
    if np.unique(y).size < 2:
        raise ValueError("Platt fit needs both positive and negative labels")
    from sklearn.linear_model import LogisticRegression  # heavy import, only where a fit happens

    lr = LogisticRegression(C=np.inf, solver="lbfgs", max_iter=1000).fit(x, y)
    return PlattParams(float(lr.coef_[0, 0]), float(lr.intercept_[0]))


def apply_platt(logits: np.ndarray, params: PlattParams) -> np.ndarray:
    if not params.calibrated:
        raise ValueError("Platt parameters are NaN: this checkpoint has no calibration fit")
    return 1.0 / (1.0 + np.exp(-(params.a * np.asarray(logits, dtype=np.float64) + params.b)))


def platt_out_of_fold(logits: np.ndarray, labels: np.ndarray, *, folds: int = 5, seed: int = 0) -> np.ndarray:
    """Calibrated probabilities where each item's map was fitted without it (honest ECE)."""
    from sklearn.model_selection import StratifiedKFold

    y = np.asarray(labels).astype(int)
    out = np.empty(y.size)
    for tr, te in StratifiedKFold(folds, shuffle=True, random_state=seed).split(np.zeros(y.size), y):
        out[te] = apply_platt(np.asarray(logits)[te], fit_platt(np.asarray(logits)[tr], y[tr]))
    return out


def reliability_bins(probs: np.ndarray, labels: np.ndarray, n_bins: int = 15) -> dict[str, np.ndarray]:
    """Equal-width bins on [0, 1]: count, mean confidence and hit rate per bin."""
    p = np.asarray(probs, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    b = np.minimum((p * n_bins).astype(np.int64), n_bins - 1)
    n = np.bincount(b, minlength=n_bins)
    conf = np.bincount(b, p, minlength=n_bins) / np.maximum(n, 1)
    acc = np.bincount(b, y, minlength=n_bins) / np.maximum(n, 1)
    return {"count": n, "confidence": conf, "accuracy": acc}


def expected_calibration_error(probs: np.ndarray, labels: np.ndarray, n_bins: int = 15) -> float:
    """sum_b (n_b / N) |hit rate_b - mean confidence_b| over equal-width bins."""
    r = reliability_bins(probs, labels, n_bins)
    n = r["count"]
    if n.sum() == 0:
        return float("nan")
    return float((n / n.sum() * np.abs(r["accuracy"] - r["confidence"])).sum())
