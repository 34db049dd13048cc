"""Union and contact region pooling for ordered pairs (Eq. 1: v_union, v_contact).

The contact region is the boxes' intersection when they overlap and the gap between them
otherwise (relate.geometry.contact_box), so touching, resting-on and near relations have a
region of their own to read.
"""

from __future__ import annotations

import torch
from torch import nn

from relate.geometry import contact_box, union_box
from relate.model.queries import RegionQueryPool

__all__ = ["PairRegionPool", "gather_pairs", "take_rows"]


def take_rows(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """x (B, N, ...) and idx (B, K) long in [0, N) -> (B, K, ...): row idx[b, k] of image b.

    Whole rows copied by one ``index_select`` over the (B * N) rows, where ``torch.gather`` with an
    index expanded over the trailing dims reads one index per element: the same values and, backward,
    the same sums in the same order, at a fraction of the cost for wide rows (a region pixel cue's
    (64 x 64) colour maps of every box, to every pair: 160 ms forward and backward on one thread
    against 30)."""
    b, n = x.shape[:2]
    rows = idx + torch.arange(b, device=idx.device, dtype=idx.dtype)[:, None] * n
    return x.reshape(b * n, *x.shape[2:]).index_select(0, rows.reshape(-1)).view(b, idx.shape[1], *x.shape[2:])


def gather_pairs(x: torch.Tensor, pairs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x (B, N, ...) and pairs (B, P, 2) long -> subject and object rows (B, P, ...) (padding: row 0)."""
    return take_rows(x, pairs[..., 0].clamp(min=0)), take_rows(x, pairs[..., 1].clamp(min=0))


class PairRegionPool(nn.Module):
    """Pools v_union and v_contact for each ordered pair."""

    def __init__(self, dim: int, heads: int, bands: int, prior_scale: float) -> None:
        super().__init__()
        self.union = RegionQueryPool(dim, heads, bands, prior_scale)
        self.contact = RegionQueryPool(dim, heads, bands, prior_scale)

    def forward(self, tokens: torch.Tensor, grid: tuple[int, int], boxes: torch.Tensor, pairs: torch.Tensor,
                masks: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """boxes (B, N, 4) normalised, pairs (B, P, 2) -> (v_union, v_contact), each (B, P, d)."""
        bs, bo = gather_pairs(boxes, pairs)
        union_masks = None
        if masks is not None:
            ms, mo = gather_pairs(masks, pairs)
            union_masks = torch.maximum(ms.float(), mo.float())
        v_u = self.union(tokens, grid, union_box(bs, bo), union_masks)
        v_c = self.contact(tokens, grid, contact_box(bs, bo))
        return v_u, v_c
