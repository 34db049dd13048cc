"""A learned linear readout for the triplet probe, cross-validated over triplets.

The zero-shot readout asks whether cos(q, t) > cos(q, d). The learned probe asks whether some
linear weighting of the feature dimensions can answer the same question on held-out triplets:
each triplet gives the pair-difference feature

    x = q * t - q * d    (elementwise, on L2-normalised features; ``features="product"``)

whose unweighted sum is exactly cos(q, t) - cos(q, d), so the probe is a learned, per-dimension
weighting of the paper's cosine readout; ``features="absdiff"`` uses |q - d| - |q - t| instead.
Every triplet enters twice, as (x, 1) and (-x, 0), so the classes are balanced and a logistic
regression without intercept is symmetric in target and distractor. ``GroupKFold`` keeps both rows
of a triplet (and, with ``groups``, every triplet of a group) in the same fold, so no triplet is
scored by a model that saw it; a triplet is correct when its held-out decision value for x is > 0.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal, Sequence

import numpy as np

__all__ = ["PairFeatures", "pair_difference_features", "LinearProbeResult", "cross_validated_probe"]

PairFeatures = Literal["product", "absdiff"]


def pair_difference_features(q: np.ndarray, t: np.ndarray, d: np.ndarray,
                             features: PairFeatures = "product") -> np.ndarray:
    """One row per triplet whose positive side favours the target (see the module docstring)."""
    q, t, d = (np.asarray(a, dtype=np.float64) for a in (q, t, d))
    if not (q.shape == t.shape == d.shape) or q.ndim != 2:
        raise ValueError(f"feature arrays must share one [N, D] shape, got {q.shape}, {t.shape}, {d.shape}")
    if features == "product":
        q, t, d = (a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12) for a in (q, t, d))
        return q * t - q * d
    if features == "absdiff":
        return np.abs(q - d) - np.abs(q - t)  # positive where the target is the nearer one
    raise ValueError(f"unknown pair features {features!r}; valid: ['product', 'absdiff']")


@dataclass(frozen=True)
class LinearProbeResult:
    """Held-out per-triplet correctness and the cross-validation's settings."""

    correct: list[bool]
    fold_accuracy: list[float]
    n_splits: int
    C: float
    features: str

    def to_dict(self) -> dict:
        return asdict(self)


def cross_validated_probe(q: np.ndarray, t: np.ndarray, d: np.ndarray, *, n_splits: int = 5,
                          C: float = 1.0, features: PairFeatures = "product",
                          groups: Sequence | None = None, standardize: bool = True,
                          max_iter: int = 1000) -> LinearProbeResult:
    """Out-of-fold correctness of a logistic-regression readout (scikit-learn), per triplet.

    ``groups`` (one label per triplet; default: the triplet itself) decides what may never be
    split between train and test. ``standardize`` scales each dimension by its training-fold
    standard deviation (no centring, which would break the x / -x symmetry).
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import GroupKFold

    x = pair_difference_features(q, t, d, features)
    n = x.shape[0]
    g = np.arange(n) if groups is None else np.asarray(groups)
    if g.shape != (n,):
        raise ValueError(f"groups must hold one label per triplet ({n}), got shape {g.shape}")
    n_groups = len(np.unique(g))
    if not 2 <= n_splits <= n_groups:
        raise ValueError(f"n_splits={n_splits} needs 2 <= n_splits <= number of groups ({n_groups})")
    rows = np.concatenate([x, -x])
    labels = np.concatenate([np.ones(n, int), np.zeros(n, int)])
    row_groups = np.concatenate([g, g])
    decision = np.full(n, np.nan)
    folds = []
    for train, test in GroupKFold(n_splits=n_splits).split(rows, labels, row_groups):
        scale = rows[train].std(axis=0) if standardize else np.ones(rows.shape[1])
        scale = np.where(scale > 1e-12, scale, 1.0)
        clf = LogisticRegression(C=C, fit_intercept=False, max_iter=max_iter)
        clf.fit(rows[train] / scale, labels[train])
        held = test[test < n]  # the (x, 1) row of each held-out triplet; its (-x, 0) twin is in the same fold
        decision[held] = clf.decision_function(x[held] / scale)
        folds.append(float((decision[held] > 0).mean()))
    correct = decision > 0
    return LinearProbeResult(correct.tolist(), folds, n_splits, C, features)
