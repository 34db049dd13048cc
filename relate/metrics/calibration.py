"""Platt calibration of the relation score and expected calibration error (seed 001, D.4, Eq. 6, Fig. 18).

The one home of Platt scaling in the code base: the parameter type stored in every checkpoint
(:class:`Calibration`), its fit, its application and the out-of-fold protocol; ``relate.model.score``
re-exports the type for Eq. 6. Raw scores are trained against a balanced prior and pile up near
1, so a threshold means nothing until two parameters (a, b) map the fused logit z to a
probability: p = sigmoid(a * z + b). With a > 0 the map is monotone, so every ranking metric is
unchanged. An uncalibrated model stores NaN, never a borrowed (a, b): thresholds do not
transfer between checkpoints.

The fit maximises the binomial likelihood with scikit-learn's unpenalised logistic regression on
the one logit feature, targets entering as sample weights. ``targets="platt"`` (the default) uses
Platt's smoothed targets, (N+ + 1) / (N+ + 2) for a positive and 1 / (N- + 2) for a negative,
which keeps the fit finite on separable data and, on the hundreds of thousands of cells a
checkpoint is fitted on, differs from the plain fit by O(1/N); ``targets="hard"`` fits the 0/1
labels themselves (unregularised 1-D logistic regression).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

__all__ = ["Calibration", "logit", "fit_platt", "apply_platt", "platt_out_of_fold",
           "expected_calibration_error", "reliability_bins"]

Targets = Literal["platt", "hard"]


@dataclass(frozen=True)
class Calibration:
    """Platt parameters (a, b) of Eq. 6; NaN means not fitted for this checkpoint."""

    a: float = math.nan
    b: float = math.nan

    @property
    def fitted(self) -> bool:
        return math.isfinite(self.a) and math.isfinite(self.b)

    def to_dict(self) -> dict:
        """The ``calibration.json`` form: NaN is written as null."""
        return {"a": None if math.isnan(self.a) else self.a, "b": None if math.isnan(self.b) else self.b}

    @classmethod
    def from_dict(cls, d: dict) -> "Calibration":
        unknown = set(d) - {"a", "b"}
        if unknown:
            raise ValueError(f"calibration has unknown keys {sorted(unknown)}; expected a, b")
        conv = lambda v: math.nan if v is None else float(v)  # noqa: E731
        return cls(conv(d.get("a")), conv(d.get("b")))


def logit(p: np.ndarray, eps: float = 1e-7) -> np.ndarray:
    """log(p / (1 - p)), with p clipped to [eps, 1 - eps]."""
    p = np.clip(np.asarray(p, dtype=np.float64), eps, 1 - eps)
    return np.log(p) - np.log1p(-p)


def _check(logits: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    z = np.asarray(logits, dtype=np.float64).reshape(-1)
    y = np.asarray(labels).reshape(-1).astype(bool)
    if z.size != y.size:
        raise ValueError(f"Platt fit: {z.size} logits but {y.size} labels")
    if not np.isfinite(z).all():
        raise ValueError(f"Platt fit: {int((~np.isfinite(z)).sum())} logits are NaN or infinite")
    if y.all() or not y.any():
        raise ValueError(f"Platt fit needs both positive and negative labels, got {int(y.sum())} positive "
                         f"of {y.size}")
    if np.ptp(z) == 0:
        raise ValueError("Platt fit: every logit is the same value, so the slope a is undefined")
    return z, y


def fit_platt(logits: np.ndarray, labels: np.ndarray, *, targets: Targets = "platt",
              max_iter: int = 1000) -> Calibration:
    """Fit (a, b) of p = sigmoid(a * logit + b) on binary labels (see the module docstring)."""
    z, y = _check(logits, labels)
    n_pos, n_neg = float(y.sum()), float((~y).sum())
    if targets == "platt":
        t = np.where(y, (n_pos + 1) / (n_pos + 2), 1 / (n_neg + 2))
    elif targets == "hard":
        if z[y].min() > z[~y].max() or z[y].max() < z[~y].min():
            raise ValueError("Platt fit: the logit separates the labels perfectly, so targets='hard' has no finite "
                             "fit; use targets='platt'")
        t = y.astype(np.float64)
    else:
        raise ValueError(f"targets={targets!r}: expected 'platt' or 'hard'")
    # soft targets as sample weights: each cell is a positive with weight t and a negative with 1 - t
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    x = np.concatenate([z, z])[:, None]
    w = np.concatenate([t, 1 - t])
    keep = w > 0
    lr = LogisticRegression(C=np.inf, tol=1e-10, max_iter=max_iter)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        try:
            lr.fit(x[keep], np.r_[np.ones(z.size), np.zeros(z.size)][keep], sample_weight=w[keep])
        except ConvergenceWarning:
            raise ValueError(f"Platt fit did not converge in {max_iter} iterations; the labels are probably "
                             "separable by the logit, where targets='hard' has no finite fit: use targets='platt'"
                             ) from None
    return Calibration(float(lr.coef_[0, 0]), float(lr.intercept_[0]))


def apply_platt(logits: np.ndarray, params: Calibration) -> np.ndarray:
    """sigmoid(a * logit + b); a float32 input stays float32."""
    if not params.fitted:
        raise ValueError("Platt parameters are NaN: this checkpoint has no calibration fit")
    from scipy.special import expit  # overflow-free for very negative logits

    x = np.asarray(logits)
    if not np.issubdtype(x.dtype, np.floating):
        x = x.astype(np.float64)
    return expit(params.a * x + params.b)


def _stratified_folds(y: np.ndarray, folds: int, seed: int) -> np.ndarray:
    """Fold index per item: positives and negatives each shuffled and dealt round-robin."""
    rng = np.random.default_rng(seed)
    fold = np.empty(y.size, dtype=np.int64)
    for cls in (True, False):
        idx = np.flatnonzero(y == cls)
        fold[rng.permutation(idx)] = np.arange(idx.size) % folds
    return fold


def platt_out_of_fold(logits: np.ndarray, labels: np.ndarray, *, folds: int = 5, seed: int = 0,
                      targets: Targets = "platt") -> np.ndarray:
    """Calibrated probabilities where each item's map was fitted without it (the honest ECE)."""
    z, y = _check(logits, labels)
    if folds < 2:
        raise ValueError(f"out-of-fold Platt needs folds >= 2, got {folds}")
    if min(y.sum(), (~y).sum()) < folds:
        raise ValueError(f"out-of-fold Platt with {folds} folds needs at least {folds} positives and negatives, "
                         f"got {int(y.sum())} positive and {int((~y).sum())} negative")
    fold = _stratified_folds(y, folds, seed)
    out = np.empty(y.size)
    for k in range(folds):
        te = fold == k
        out[te] = apply_platt(z[te], fit_platt(z[~te], y[~te], targets=targets))
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
