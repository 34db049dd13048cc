"""THE relation score (Eq. 6, App. D.1), shared by training validation, evaluation and serving.

s = sigmoid(a * (l_pred + w * l_pair) + b). The Platt parameters (a, b) are stored as NaN until a
fit installs them (they never transfer between checkpoints); an unfitted score uses a = 1, b = 0,
which ranks identically but whose values are not probabilities, so thresholds are refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["Calibration", "relation_logit", "relation_score", "fit_platt"]


@dataclass(frozen=True)
class Calibration:
    """Platt parameters of Eq. 6; NaN means not fitted for this checkpoint."""

    a: float = math.nan
    b: float = math.nan

    @property
    def fitted(self) -> bool:
        return math.isfinite(self.a) and math.isfinite(self.b)

    def to_dict(self) -> dict:
        return {"a": None if math.isnan(self.a) else self.a, "b": None if math.isnan(self.b) else self.b}

    @classmethod
    def from_dict(cls, d: dict) -> "Calibration":
        unknown = set(d) - {"a", "b"}
        if unknown:
            raise ValueError(f"calibration has unknown keys {sorted(unknown)}; expected a, b")
        conv = lambda v: math.nan if v is None else float(v)  # noqa: E731
        return cls(conv(d.get("a")), conv(d.get("b")))


def relation_logit(l_pred, l_pair, w: float):
    """The fused logit inside Eq. 6: l_pred (..., V) + w * l_pair (...) broadcast over V."""
    if isinstance(l_pred, torch.Tensor):
        return l_pred + w * torch.as_tensor(l_pair, dtype=l_pred.dtype, device=l_pred.device).unsqueeze(-1)
    return np.asarray(l_pred) + w * np.asarray(l_pair)[..., None]


def relation_score(l_pred, l_pair, w: float, calibration: Calibration = Calibration()):
    """Eq. 6 on tensors or arrays; uncalibrated uses (a, b) = (1, 0)."""
    a, b = (calibration.a, calibration.b) if calibration.fitted else (1.0, 0.0)
    z = a * relation_logit(l_pred, l_pair, w) + b
    if isinstance(z, torch.Tensor):
        return torch.sigmoid(z)
    from scipy.special import expit  # overflow-free for very negative logits

    return expit(z)


def fit_platt(logits: np.ndarray, labels: np.ndarray) -> Calibration:
    """Fit (a, b) on fused logits against binary labels (sklearn logistic regression, 1-D)."""
    from sklearn.linear_model import LogisticRegression

    x = np.asarray(logits, dtype=np.float64).reshape(-1, 1)
    y = np.asarray(labels).reshape(-1).astype(int)
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"fit_platt: {x.shape[0]} logits but {y.shape[0]} labels")
    if len(np.unique(y)) < 2:
        raise ValueError("fit_platt needs both positive and negative labels")
    lr = LogisticRegression(C=1e6, max_iter=1000).fit(x, y)
    return Calibration(float(lr.coef_[0, 0]), float(lr.intercept_[0]))
