"""Spatial and semantic branches scored against the text bank, mixed per predicate (Eq. 2).

l_pred(i, j, p) = tau * [alpha_p cos(z_spa, e_p) + (1 - alpha_p) cos(z_sem, e_p)] + beta, with
alpha_p = g(e_p) computed from the text embedding alone so it exists for unseen strings. No
learned layer transforms e_p for scoring: swapping the vocabulary swaps the [V, D] matrix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any
import torch
import torch.nn.functional as F
from torch import nn

from relate.model.onednn import onednn_pack

__all__ = ["PredicateGate", "TwoBranchHead", "BranchScores", "ScoringMatrix"]


@dataclass(frozen=True)
class ScoringMatrix:
    """A vocabulary ready for scoring: Eq. 2's mixing folded into the bank, so the logits of every
    kept pair against every predicate are one fp32 product plus beta.

    ``weight_t`` is (2 * text_dim, V), column p = [alpha_p e_p; (1 - alpha_p) e_p]; on CPU a
    oneDNN-prepacked copy (``packed``) is used in its place (MKL's ``addmm`` on AMD cores runs the
    (128 x 768) x (768 x 19,103) product in about 33 ms, the packed kernel in about 18 ms). Built by
    ``TwoBranchHead.scoring_matrix`` once per vocabulary and weights (relate.api caches it)."""

    weight_t: torch.Tensor
    packed: torch.Tensor | None = field(default=None, repr=False)

    @property
    def num_predicates(self) -> int:
        return self.weight_t.shape[1]

    @torch.compiler.disable  # one library call on an opaque packed tensor: nothing for a compiler to fuse
    def logits(self, z: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
        """(..., 2 * text_dim) pair vectors (tau already applied) -> (..., V) logits."""
        flat = z.reshape(-1, z.shape[-1])
        bias = beta.to(flat.dtype).expand(self.num_predicates).contiguous()  # oneDNN misreads a stride-0 bias
        if self.packed is not None and flat.dtype == torch.float32 and flat.device.type == "cpu":
            out = torch.ops.mkldnn._linear_pointwise(flat.contiguous(), self.packed, bias, "none", [None], "")
        else:
            out = torch.addmm(bias, flat, self.weight_t.to(flat.dtype))
        return out.view(*z.shape[:-1], self.num_predicates)


@dataclass
class BranchScores:
    """Per kept pair x predicate scores. ``logits`` is always computed; the branch cosines and the
    mixed cosine are computed on first access (inference rarely reads them, and at 19,103
    predicates each is a (P, V) matrix that would cost as much as the logits themselves).

    A dataclass on purpose: DDP finds the tensors of a forward's output by walking dataclass
    fields, and a parameter it cannot reach from them (tau, beta) it would mark unused.
    """

    logits: torch.Tensor  # (..., V) l_pred of Eq. 2
    z_spa: torch.Tensor  # (..., text_dim) unit spatial-branch embedding
    z_sem: torch.Tensor  # (..., text_dim) unit semantic-branch embedding
    bank: torch.Tensor  # (V, text_dim)
    gate: Any  # (V,) alpha_p, or a callable computing it on first use
    cached_mixed: torch.Tensor | None = None
    cached_cos: tuple[torch.Tensor, torch.Tensor] | None = field(default=None, repr=False)

    @property
    def alpha(self) -> torch.Tensor:  # (V,) the gate alpha_p
        if callable(self.gate):
            self.gate = self.gate()
        return self.gate

    def _cosines(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.cached_cos is None:
            self.cached_cos = (self.z_spa @ self.bank.T, self.z_sem @ self.bank.T)
        return self.cached_cos

    @property
    def cos_spa(self) -> torch.Tensor:  # (..., V)
        return self._cosines()[0]

    @property
    def cos_sem(self) -> torch.Tensor:  # (..., V)
        return self._cosines()[1]

    @property
    def mixed(self) -> torch.Tensor:  # (..., V) the mixed cosine c of Eq. 5
        if self.cached_mixed is None:
            c_spa, c_sem = self._cosines()
            self.cached_mixed = self.alpha * c_spa + (1 - self.alpha) * c_sem
        return self.cached_mixed


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

    def scoring_matrix(self, bank: torch.Tensor, alpha: torch.Tensor | None = None,
                       rows_hint: int = 128, pack: bool = True) -> ScoringMatrix:
        """The vocabulary folded for scoring (see ``ScoringMatrix``): column p is
        [alpha_p e_p; (1 - alpha_p) e_p]. Stored transposed and contiguous (about 10% faster than a
        transposed view at 19,103 predicates with a BLAS product), plus a oneDNN-packed copy on CPU
        laid out for about ``rows_hint`` pairs per call (``pack=False`` skips it: packing costs about
        one product, so it pays only for a matrix that is reused). Computed once per vocabulary and weights."""
        with torch.no_grad():
            a = self.gate(bank) if alpha is None else alpha.to(bank.dtype)
            rows = torch.cat([a[:, None] * bank, (1 - a)[:, None] * bank], dim=-1)
            return ScoringMatrix(rows.T.contiguous(), onednn_pack(rows, rows_hint) if pack else None)

    def forward(self, x: torch.Tensor, geo: torch.Tensor, bank: torch.Tensor,
                alpha: torch.Tensor | None = None, scoring: ScoringMatrix | None = None) -> BranchScores:
        """bank (V, text_dim) unit rows; ``alpha`` (V,) and ``scoring`` (``scoring_matrix``) may be
        precomputed once per vocabulary. Without gradients the logits come from one fused product."""
        z_spa, z_sem = self.embed(x, geo)
        bank = bank.to(z_spa.dtype)
        if torch.is_grad_enabled():
            a = self.gate(bank) if alpha is None else alpha.to(z_spa.dtype)
            mixed = a * (z_spa @ bank.T) + (1 - a) * (z_sem @ bank.T)
            return BranchScores(self.tau * mixed + self.beta, z_spa, z_sem, bank, a, mixed)
        if scoring is not None:  # the gate is folded in already; alpha only if someone reads it
            if not isinstance(scoring, ScoringMatrix):
                raise TypeError(f"scoring must be a ScoringMatrix (head.scoring_matrix), got {type(scoring).__name__}")
            if scoring.num_predicates != bank.shape[0]:
                raise ValueError(f"scoring matrix has {scoring.num_predicates} predicates, bank has {bank.shape[0]}")
            a = (lambda: self.gate(bank)) if alpha is None else alpha.to(z_spa.dtype)
        else:
            a = self.gate(bank) if alpha is None else alpha.to(z_spa.dtype)
            scoring = self.scoring_matrix(bank, a, pack=False)  # used once
        z = torch.cat([z_spa, z_sem], dim=-1) * self.tau
        # l_pred = (tau z) . w + beta in one library call: no (P, V) temporaries besides the result
        return BranchScores(scoring.logits(z, self.beta), z_spa, z_sem, bank, a)
