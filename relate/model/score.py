"""THE relation score (Eq. 6, App. D.1), shared by training validation, evaluation and serving.

s = sigmoid(a * (l_pred + w * l_pair) + b). The Platt parameters (a, b) live in
``relate.metrics.calibration`` (the one home of Platt scaling: the type, its fit, out-of-fold ECE)
and are re-exported here. They are NaN until a fit installs them (they never transfer between
checkpoints); an unfitted score uses a = 1, b = 0, which ranks identically but whose values are
not probabilities, so thresholds are refused.
"""

from __future__ import annotations

import numpy as np
import torch

from relate.metrics.calibration import Calibration, apply_platt, fit_platt

__all__ = ["Calibration", "relation_logit", "relation_score", "fit_platt"]

_RAW = Calibration(1.0, 0.0)


def relation_logit(l_pred, l_pair, w: float):
    """The fused logit inside Eq. 6: l_pred (..., V) + w * l_pair (...) broadcast over V."""
    if isinstance(l_pred, torch.Tensor):
        return l_pred + w * torch.as_tensor(l_pair, dtype=l_pred.dtype, device=l_pred.device).unsqueeze(-1)
    return np.asarray(l_pred) + w * np.asarray(l_pair)[..., None]


def relation_score(l_pred, l_pair, w: float, calibration: Calibration = Calibration()):
    """Eq. 6 on tensors or arrays; uncalibrated uses (a, b) = (1, 0)."""
    cal = calibration if calibration.fitted else _RAW
    z = relation_logit(l_pred, l_pair, w)
    if isinstance(z, torch.Tensor):
        return torch.sigmoid(cal.a * z + cal.b)
    return apply_platt(z, cal)
