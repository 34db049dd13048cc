"""Pair representation (Eq. 1) and the pair transformer of § 3.2.

x_ij = [v_i; v_j; v_union; v_contact; MLP(g_ij)] W_proj in R^d, g_ij being the 19 geometry
features of relate.geometry.pair_features. The transformer refines sampled pairs with
self-attention over pairs and cross-attention to the scene tokens together with four tokens that
encode the pair's own box corners, then joint self-attention over pairs and scene tokens.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from relate.geometry import N_PAIR_FEATURES, pair_features
from relate.model.pooling import gather_pairs
from relate.model.queries import FourierEncoding

__all__ = ["GeometryMLP", "PairEncoder", "PairTransformer", "geometry_features"]


def geometry_features(bs: torch.Tensor, bo: torch.Tensor, mask_slots: torch.Tensor | None = None) -> torch.Tensor:
    """The 19 g_ij for pixel boxes (..., 4); mask slots replaced when masks were given; clamped."""
    g = pair_features(bs.float(), bo.float())
    if mask_slots is not None:
        g = torch.cat([g[..., :15], mask_slots.to(g)], dim=-1)
    return g.clamp(-10.0, 10.0)


class GeometryMLP(nn.Module):
    def __init__(self, hidden: int, out: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(N_PAIR_FEATURES, hidden), nn.GELU(), nn.Linear(hidden, out))

    def forward(self, g: torch.Tensor) -> torch.Tensor:
        return self.net(g)


class PairEncoder(nn.Module):
    """Eq. 1: concatenate the five parts and project to d."""

    def __init__(self, dim: int, geometry_hidden: int, dropout: float) -> None:
        super().__init__()
        self.geometry = GeometryMLP(geometry_hidden, dim)
        self.proj = nn.Sequential(nn.Linear(5 * dim, dim), nn.Dropout(dropout), nn.LayerNorm(dim))

    def forward(self, v_s, v_o, v_u, v_c, g) -> torch.Tensor:
        return self.proj(torch.cat([v_s, v_o, v_u, v_c, self.geometry(g)], dim=-1))


class _CornerCrossAttention(nn.Module):
    """Each pair attends over the shared scene tokens plus its own four corner tokens."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))

    def forward(self, x: torch.Tensor, scene: torch.Tensor, corners: torch.Tensor) -> torch.Tensor:
        b, p, d = x.shape
        h, dh = self.heads, d // self.heads
        q = self.q(x).view(b, p, h, dh)
        ks, vs = self.k(scene).view(b, -1, h, dh), self.v(scene).view(b, -1, h, dh)
        kc, vc = self.k(corners).view(b, p, 4, h, dh), self.v(corners).view(b, p, 4, h, dh)
        ls = torch.einsum("bphd,bshd->bhps", q, ks)
        # a pair's own four corners: a product and a sum over d, element-wise (as a batched matrix product
        # this is one (1 x d)(d x 4) product a pair and head, 2x slower forward and backward on a CPU)
        lc = (q.unsqueeze(2) * kc).sum(-1).permute(0, 3, 1, 2)
        attn = torch.softmax(torch.cat([ls, lc], dim=-1) / dh ** 0.5, dim=-1)
        s = ls.shape[-1]
        out = torch.einsum("bhps,bshd->bphd", attn[..., :s], vs)
        out = out + (attn[..., s:].permute(0, 2, 3, 1).unsqueeze(-1) * vc).sum(2)
        return self.o(out.reshape(b, p, d))


class _PairLayer(nn.Module):
    def __init__(self, dim: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.self_attn = nn.MultiheadAttention(dim, heads, dropout=dropout, batch_first=True)
        self.cross = _CornerCrossAttention(dim, heads)
        self.ff = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Dropout(dropout), nn.Linear(2 * dim, dim))
        self.n1, self.n2, self.n3 = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)

    def forward(self, x, scene, corners, pad):
        y = self.n1(x)
        x = x + self.self_attn(y, y, y, key_padding_mask=pad, need_weights=False)[0]
        x = x + self.cross(self.n2(x), scene, corners)
        return x + self.ff(self.n3(x))


class PairTransformer(nn.Module):
    """Refines (B, P, d) pair vectors against each other and the scene (B, S, d)."""

    def __init__(self, dim: int, heads: int, layers: int, joint_layers: int, bands: int, dropout: float) -> None:
        super().__init__()
        self.corner_enc = FourierEncoding(2, bands, dim)
        self.corner_type = nn.Parameter(torch.zeros(4, dim))
        nn.init.normal_(self.corner_type, std=0.02)
        self.layers = nn.ModuleList(_PairLayer(dim, heads, dropout) for _ in range(layers))
        self.joint = nn.ModuleList(
            nn.TransformerEncoderLayer(dim, heads, 2 * dim, dropout, batch_first=True, norm_first=True)
            for _ in range(joint_layers))

    def pair_corners(self, boxes: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
        """boxes (B, N, 4) normalised, pairs (B, P, 2) -> (B, P, 4, d): the encodings ``forward`` makes
        from the pairs' boxes, made once a box and gathered to its pairs (a box is in up to 2(N-1) pairs;
        cpu_long: 160 boxes against 1,600 pairs a step)."""
        b, n = boxes.shape[:2]
        per_box = self.corner_enc(boxes.reshape(b, n, 2, 2))  # (B, N, 2, d): top-left, bottom-right
        return torch.cat(gather_pairs(per_box, pairs), dim=-2) + self.corner_type

    def forward(self, x: torch.Tensor, scene: torch.Tensor, bs: torch.Tensor, bo: torch.Tensor,
                pad: torch.Tensor, corners: torch.Tensor | None = None) -> torch.Tensor:
        """bs, bo (B, P, 4) normalised subject/object boxes; pad (B, P) True where padding; ``corners``
        (B, P, 4, d), ``pair_corners`` of the same boxes, when the caller has the pairs' indices."""
        if corners is None:
            pts = torch.stack([bs[..., :2], bs[..., 2:], bo[..., :2], bo[..., 2:]], dim=-2)  # (B, P, 4, 2)
            corners = self.corner_enc(pts) + self.corner_type
        # an image with no valid pair would make every key padding and the softmax NaN
        pad = pad & ~pad.all(dim=1, keepdim=True)
        for layer in self.layers:
            x = layer(x, scene, corners, pad)
        if len(self.joint):
            s = scene.shape[1]
            tokens = torch.cat([x, scene], dim=1)
            full_pad = torch.cat([pad, pad.new_zeros(pad.shape[0], s)], dim=1)
            for block in self.joint:
                tokens = block(tokens, src_key_padding_mask=full_pad)
            x = tokens[:, : x.shape[1]]
        return x


def scene_tokens(fmap: torch.Tensor, grid: int) -> torch.Tensor:
    """(B, d, h, w) -> (B, grid*grid, d) by average pooling (keeps the joint block affordable)."""
    pooled = F.adaptive_avg_pool2d(fmap, (min(grid, fmap.shape[2]), min(grid, fmap.shape[3])))
    return pooled.flatten(2).transpose(1, 2)
