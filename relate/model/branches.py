"""Spatial and semantic branches scored against the text bank, mixed per predicate (Eq. 2).

l_pred(i, j, p) = tau * [alpha_p cos(z_spa, e_p) + (1 - alpha_p) cos(z_sem, e_p)] + beta, with
alpha_p = g(e_p) computed from the text embedding alone so it exists for unseen strings. No
learned layer transforms e_p for scoring: swapping the vocabulary swaps the [V, D] matrix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["PredicateGate", "TwoBranchHead", "BranchScores"]


@dataclass
class BranchScores:
    cos_spa: torch.Tensor  # (..., V)
    cos_sem: torch.Tensor  # (..., V)
    alpha: torch.Tensor  # (V,)
    mixed: torch.Tensor  # (..., V) the mixed cosine c of Eq. 5
    logits: torch.Tensor  # (..., V) l_pred of Eq. 2


class PredicateGate(nn.Module):
    """alpha_p = sigmoid(g(e_p)); the gate is unsupervised (A.3)."""

    def __init__(self, text_dim: int, hidden: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(text_dim, hidden), nn.GELU(), nn.Linear(hidden, 1))

    def forward(self, bank: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.net(bank).squeeze(-1))


def _mlp(i: int, h: int, o: int, dropout: float) -> nn.Sequential:
    return nn.Sequential(nn.Linear(i, h), nn.GELU(), nn.Dropout(dropout), nn.Linear(h, o))


class TwoBranchHead(nn.Module):
    def __init__(self, dim: int, text_dim: int, gate_hidden: int, tau_init: float, beta_init: float,
                 dropout: float) -> None:
        super().__init__()
        self.spatial = _mlp(2 * dim, dim, text_dim, dropout)  # pair vector + geometry embedding
        self.semantic = _mlp(dim, dim, text_dim, dropout)
        self.gate = PredicateGate(text_dim, gate_hidden)
        self.log_tau = nn.Parameter(torch.tensor(math.log(tau_init)))
        self.beta = nn.Parameter(torch.tensor(float(beta_init)))

    @property
    def tau(self) -> torch.Tensor:
        return self.log_tau.exp()

    def embed(self, x: torch.Tensor, geo: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Unit-norm z_spa, z_sem (..., text_dim)."""
        z_spa = F.normalize(self.spatial(torch.cat([x, geo], dim=-1)), dim=-1)
        return z_spa, F.normalize(self.semantic(x), dim=-1)

    def forward(self, x: torch.Tensor, geo: torch.Tensor, bank: torch.Tensor,
                alpha: torch.Tensor | None = None) -> BranchScores:
        """bank (V, text_dim) unit rows; ``alpha`` may be precomputed once per vocabulary."""
        z_spa, z_sem = self.embed(x, geo)
        bank = bank.to(z_spa.dtype)
        cos_spa, cos_sem = z_spa @ bank.T, z_sem @ bank.T
        a = self.gate(bank) if alpha is None else alpha.to(cos_spa.dtype)
        mixed = a * cos_spa + (1 - a) * cos_sem
        return BranchScores(cos_spa, cos_sem, a, mixed, self.tau * mixed + self.beta)
