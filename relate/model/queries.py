"""Per-region queries: a Fourier encoding of the box cross-attends over all patch tokens (§ 3.2).

v_i = Attn(q(b_i), F, F): coordinate-aware soft pooling rather than cropping, so a region's
feature can draw on the context it interacts with. Keys carry a Fourier encoding of each patch
centre, and a learned-scale log prior favours tokens inside the region; a mask, when given,
replaces the box as that prior (masks are accepted in place of boxes at inference).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["FourierEncoding", "RegionQueryPool", "region_prior", "patch_centres"]


class FourierEncoding(nn.Module):
    """Coordinates in [0, 1] (..., k) -> (..., out_dim) via sin/cos at octave frequencies + MLP."""

    def __init__(self, in_coords: int, bands: int, out_dim: int) -> None:
        super().__init__()
        self.register_buffer("freqs", (2.0 ** torch.arange(bands)) * math.pi, persistent=False)
        self.mlp = nn.Sequential(nn.Linear(in_coords * (2 * bands + 1), out_dim), nn.GELU(), nn.Linear(out_dim, out_dim))

    def forward(self, coords: torch.Tensor) -> torch.Tensor:
        ang = coords.unsqueeze(-1) * self.freqs
        feats = torch.cat([coords.unsqueeze(-1), torch.sin(ang), torch.cos(ang)], dim=-1)
        return self.mlp(feats.flatten(-2))


def patch_centres(h: int, w: int, device: torch.device | None = None) -> torch.Tensor:
    """(h*w, 2) normalised (x, y) centres of a patch grid in row-major order."""
    ys = (torch.arange(h, device=device, dtype=torch.float32) + 0.5) / h
    xs = (torch.arange(w, device=device, dtype=torch.float32) + 0.5) / w
    yy, xx = torch.meshgrid(ys, xs, indexing="ij")
    return torch.stack([xx.flatten(), yy.flatten()], dim=-1)


def region_prior(boxes: torch.Tensor, h: int, w: int, masks: torch.Tensor | None = None) -> torch.Tensor:
    """Soft share of each patch inside each region: (B, N, h*w) in (0, 1).

    ``boxes`` (B, N, 4) normalised. A box is widened to at least one patch so zero-area contact
    regions still pool something. ``masks`` (B, N, H, W), if given, are area-resized to the grid.
    """
    if masks is not None:
        grid = F.adaptive_avg_pool2d(masks.float().flatten(0, 1).unsqueeze(1), (h, w))
        return grid.view(boxes.shape[0], boxes.shape[1], h * w).clamp(0, 1)
    c = patch_centres(h, w, boxes.device)
    half_x = ((boxes[..., 2] - boxes[..., 0]) * 0.5).clamp(min=0.5 / w)
    half_y = ((boxes[..., 3] - boxes[..., 1]) * 0.5).clamp(min=0.5 / h)
    cx, cy = (boxes[..., 0] + boxes[..., 2]) * 0.5, (boxes[..., 1] + boxes[..., 3]) * 0.5
    # signed distance to the edge in patch units; sigmoid makes the edge soft
    dx = (half_x.unsqueeze(-1) - (c[:, 0] - cx.unsqueeze(-1)).abs()) * w
    dy = (half_y.unsqueeze(-1) - (c[:, 1] - cy.unsqueeze(-1)).abs()) * h
    return torch.sigmoid(2 * dx) * torch.sigmoid(2 * dy)


class RegionQueryPool(nn.Module):
    """Pools one d-vector per region from patch tokens by box-query cross-attention."""

    def __init__(self, dim: int, heads: int, bands: int, prior_scale: float) -> None:
        super().__init__()
        self.heads = heads
        self.box_enc = FourierEncoding(4, bands, dim)
        self.pos_enc = FourierEncoding(2, bands, dim)
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)
        self.norm = nn.LayerNorm(dim)
        self.prior_scale = nn.Parameter(torch.tensor(float(prior_scale)))

    def forward(self, tokens: torch.Tensor, grid: tuple[int, int], boxes: torch.Tensor,
                masks: torch.Tensor | None = None) -> torch.Tensor:
        """tokens (B, h*w, d), boxes (B, N, 4) normalised -> (B, N, d)."""
        b, n = boxes.shape[:2]
        h, w = grid
        pos = self.pos_enc(patch_centres(h, w, tokens.device)).unsqueeze(0)
        box = self.box_enc(boxes)  # the query and the residual: one encoding
        q = self.q(box).view(b, n, self.heads, -1).transpose(1, 2)
        k = self.k(tokens + pos).view(b, h * w, self.heads, -1).transpose(1, 2)
        v = self.v(tokens).view(b, h * w, self.heads, -1).transpose(1, 2)
        bias = self.prior_scale * torch.log(region_prior(boxes, h, w, masks) + 1e-4)
        attn = F.scaled_dot_product_attention(q, k, v, attn_mask=bias.unsqueeze(1))
        pooled = self.out(attn.transpose(1, 2).reshape(b, n, -1))
        return self.norm(pooled + box)
