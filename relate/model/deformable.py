"""The zero-initialised, gated deformable scene read of App. A.2.

Each pair predicts, per head, ``points`` sampling offsets around each of four anchors (subject,
object, union, contact), in units of that anchor's half-extent and unbounded (the anchors are a
prior, not a constraint). Points start on rings of distinct angles and radii per head so their
gradients differ from step one. Attention spans the 4*points reads plus ``null_slots`` learned
values (reading nothing in particular). The result is added through a gate initialised at zero,
so training starts from the model without the read.

The reads and their attention are one sum: each head's 4*points bilinear reads of a pair, weighted by
its attention, are a weighting of the feature map's cells (four corner weights a read). ``bilinear_read``
builds that (pairs x cells) weighting per image and head with one scatter and applies it with one
matrix product: the same sums as ``torch.nn.functional.grid_sample`` (bilinear, ``border`` padding,
``align_corners=False``) followed by the weighted sum, which had materialised every read of every pair,
(B, P, H, 4*points, d/H), in a permuted layout: about a fifth of a one-thread ``cpu_long`` step.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from relate.model.config import DeformableConfig

__all__ = ["DeformableRead", "ring_offsets", "bilinear_read"]

N_ANCHORS = 4


def ring_offsets(heads: int, points: int, r_min: float, r_max: float) -> torch.Tensor:
    """(heads, 4, points, 2) initial offsets: per head a ring with its own radius and phase."""
    out = torch.zeros(heads, N_ANCHORS, points, 2)
    for h in range(heads):
        radius = r_min + (r_max - r_min) * (h / max(heads - 1, 1))
        for k in range(points):
            ang = 2 * math.pi * (k / points + h / (heads * points))
            out[h, :, k, 0] = radius * math.cos(ang)
            out[h, :, k, 1] = radius * math.sin(ang)
    return out


def bilinear_read(val: torch.Tensor, grid: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """val (N, C, h, w); grid (N, P, K, 2) as (x, y) in [-1, 1]; weights (N, P, K) -> (N, P, C): for each
    of the P rows, the sum over its K points of weight times the bilinear read of ``val`` at the point,
    exactly ``(grid_sample(val, grid, "bilinear", "border", align_corners=False) * weights).sum(K)``
    (a point beyond the frame reads its edge; the gradient reaches val, grid and weights as there)."""
    n, c, h, w = val.shape
    # positions and weights in float32 whatever autocast gives (grid_sample, which this replaces, runs
    # in float32 under autocast): bfloat16 coordinates between 8 and 16 come in steps of 1/16 of a cell
    grid, weights = grid.float(), weights.float()
    # align_corners=False: -1 and 1 are the outer pixels' outer edges; border: clamp to the pixel centres
    ix = (((grid[..., 0] + 1) * w - 1) * 0.5).clamp(0, w - 1)
    iy = (((grid[..., 1] + 1) * h - 1) * 0.5).clamp(0, h - 1)
    x0, y0 = ix.detach().floor(), iy.detach().floor()
    fx, fy = ix - x0, iy - y0
    x0, y0 = x0.long(), y0.long()
    x1, y1 = (x0 + 1).clamp(max=w - 1), (y0 + 1).clamp(max=h - 1)  # a clamped corner has weight 0
    cells = torch.cat([y0 * w + x0, y0 * w + x1, y1 * w + x0, y1 * w + x1], dim=-1)
    gx, gy = 1 - fx, 1 - fy
    corner = torch.cat([gy * gx * weights, gy * fx * weights, fy * gx * weights, fy * fx * weights], dim=-1)
    mix = corner.new_zeros(n, grid.shape[1], h * w).scatter_add(-1, cells, corner)  # (N, P, h*w)
    return torch.bmm(mix.to(val.dtype), val.flatten(2).transpose(1, 2))


class DeformableRead(nn.Module):
    def __init__(self, dim: int, cfg: DeformableConfig) -> None:
        super().__init__()
        self.h, self.k, self.nulls = cfg.heads, cfg.points, cfg.null_slots
        self.offsets = nn.Linear(dim, self.h * N_ANCHORS * self.k * 2)
        nn.init.zeros_(self.offsets.weight)
        with torch.no_grad():
            self.offsets.bias.copy_(ring_offsets(self.h, self.k, cfg.ring_min, cfg.ring_max).flatten())
        self.weights = nn.Linear(dim, self.h * (N_ANCHORS * self.k + self.nulls))
        self.value = nn.Linear(dim, dim)
        self.null_values = nn.Parameter(torch.randn(self.h, max(self.nulls, 1), dim // self.h) * 0.02)
        self.out = nn.Linear(dim, dim)
        self.gate = nn.Parameter(torch.zeros(()))  # A.2: zero-initialised, its own gradient decides

    def sample_locations(self, x: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
        """x (B, P, d), anchors (B, P, 4, 4) normalised boxes -> (B, P, H, 4, K, 2) in [0, 1] units."""
        b, p, _ = x.shape
        off = self.offsets(x).view(b, p, self.h, N_ANCHORS, self.k, 2)
        centre = (anchors[..., :2] + anchors[..., 2:]) * 0.5
        half = ((anchors[..., 2:] - anchors[..., :2]) * 0.5).clamp(min=1e-3)
        return centre[:, :, None, :, None, :] + off * half[:, :, None, :, None, :]

    def forward(self, x: torch.Tensor, fmap: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
        """x (B, P, d), fmap (B, d, h, w), anchors (B, P, 4, 4) -> x + gate * read."""
        b, p, d = x.shape
        dh = d // self.h
        loc = self.sample_locations(x, anchors)  # (B, P, H, 4, K, 2)
        grid = (loc * 2 - 1).permute(0, 2, 1, 3, 4, 5).reshape(b * self.h, p, N_ANCHORS * self.k, 2)
        val = self.value(fmap.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        val = val.reshape(b * self.h, dh, fmap.shape[2], fmap.shape[3])
        w = torch.softmax(self.weights(x).view(b, p, self.h, -1), dim=-1)
        # border padding: reads beyond the frame are clamped to its edge (A.2)
        on_points = w[..., : N_ANCHORS * self.k].permute(0, 2, 1, 3).reshape(b * self.h, p, N_ANCHORS * self.k)
        read = bilinear_read(val, grid, on_points).view(b, self.h, p, dh).permute(0, 2, 1, 3)  # B,P,H,dh
        if self.nulls:
            read = read + torch.einsum("bphn,hnd->bphd", w[..., N_ANCHORS * self.k:], self.null_values)
        return x + self.gate * self.out(read.reshape(b, p, d))
