"""The two-stage pair sampler of § 3.2.

Stage 1 scores every ordered pair (i != j) from its 19 geometry features alone and keeps
``geometry_keep``; stage 2 scores the survivors from their region features and geometry and keeps
``learned_keep``. Its logit l_pair enters the relation score additively (Eq. 6). In training every
pair marked ``force`` (the annotated pairs and their reverses) survives both stages, so the
losses always see their positives.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from relate.geometry import N_PAIR_FEATURES
from relate.model.pooling import take_rows

__all__ = ["PairSampler", "SampledPairs", "candidate_grid"]

_FORCE_BONUS = 1e4


@dataclass
class SampledPairs:
    pairs: torch.Tensor  # (B, P, 2) long, -1 where padding
    valid: torch.Tensor  # (B, P) bool
    flat: torch.Tensor  # (B, P) long flat index i * N + j (0 where padding)
    l_pair: torch.Tensor  # (B, P) relatedness logit of the kept pairs
    geo_logits: torch.Tensor  # (B, N*N) stage-1 logit of every candidate
    geo_valid: torch.Tensor  # (B, N*N) bool: a real ordered pair i != j
    rel_flat: torch.Tensor  # (B, K1) flat indices of the stage-1 survivors
    rel_logits: torch.Tensor  # (B, K1) stage-2 logits of the survivors
    rel_valid: torch.Tensor  # (B, K1) bool


def candidate_grid(box_valid: torch.Tensor) -> torch.Tensor:
    """(B, N) -> (B, N*N) bool, True for ordered pairs of two real, distinct boxes."""
    n = box_valid.shape[1]
    eye = torch.eye(n, dtype=torch.bool, device=box_valid.device)
    return (box_valid[:, :, None] & box_valid[:, None, :] & ~eye).flatten(1)


def _select(scores: torch.Tensor, valid: torch.Tensor, force: torch.Tensor | None, keep: int):
    """Top-``keep`` (at least every forced one) of valid candidates -> (index, valid) tensors."""
    rank = scores.detach().masked_fill(~valid, float("-inf"))
    if force is not None:
        rank = rank + _FORCE_BONUS * (force & valid).float()
        keep = max(keep, int((force & valid).sum(1).max().item()) if force.numel() else 0)
    keep = max(1, min(keep, scores.shape[1]))
    top = rank.topk(keep, dim=1)
    return top.indices, torch.isfinite(top.values)


class PairSampler(nn.Module):
    def __init__(self, dim: int, hidden: int, geometry_keep: int, learned_keep: int) -> None:
        super().__init__()
        self.geometry_keep, self.learned_keep = geometry_keep, learned_keep
        self.geometry = nn.Sequential(nn.Linear(N_PAIR_FEATURES, hidden), nn.GELU(), nn.Linear(hidden, 1))
        self.related = nn.Sequential(nn.Linear(2 * dim + N_PAIR_FEATURES, hidden), nn.GELU(), nn.Linear(hidden, 1))

    def forward(self, g_all: torch.Tensor, v: torch.Tensor, box_valid: torch.Tensor,
                force: torch.Tensor | None = None) -> SampledPairs:
        """g_all (B, N*N, 19) geometry of every ordered pair, v (B, N, d) region features."""
        b, n = box_valid.shape
        geo_valid = candidate_grid(box_valid)
        geo_logits = self.geometry(g_all).squeeze(-1)
        idx1, ok1 = _select(geo_logits, geo_valid, force, self.geometry_keep)
        g1 = torch.gather(g_all, 1, idx1[..., None].expand(-1, -1, g_all.shape[-1]))
        vs, vo = take_rows(v, idx1 // n), take_rows(v, idx1 - idx1 // n * n)
        rel_logits = self.related(torch.cat([vs, vo, g1], dim=-1)).squeeze(-1)
        f1 = torch.gather(force, 1, idx1) if force is not None else None
        idx2, ok2 = _select(rel_logits.masked_fill(~ok1, float("-inf")), ok1, f1, self.learned_keep)
        flat = torch.gather(idx1, 1, idx2)
        l_pair = torch.gather(rel_logits, 1, idx2)
        pairs = torch.stack([flat // n, flat - flat // n * n], dim=-1).masked_fill(~ok2[..., None], -1)
        return SampledPairs(pairs, ok2, flat.masked_fill(~ok2, 0), l_pair, geo_logits, geo_valid,
                            idx1, rel_logits, ok1)
