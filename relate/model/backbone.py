"""The pixel encoder: a timm ViT by name, patch maps tapped at several depths and fused (§ 3.2, A.1).

Each tap is layer-normalised on its own before a learned softmax-weighted sum, because without it
the last block's larger activations dominate the fusion (A.1). Preprocessing (mean, std,
interpolation) comes from the timm model's own ``pretrained_cfg`` so it travels with the weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import timm
import torch
from torch import nn

from relate.model.config import BackboneConfig

__all__ = ["Preprocessing", "TappedBackbone", "create_backbone"]


@dataclass(frozen=True)
class Preprocessing:
    """How pixels must be normalised for this backbone (from timm's pretrained_cfg)."""

    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    interpolation: str
    img_size: int
    patch_size: int
    keep_aspect: bool = False

    def normalise(self, images: torch.Tensor) -> torch.Tensor:
        """``images`` float in [0, 1], (B, 3, H, W) -> normalised."""
        mean = images.new_tensor(self.mean).view(1, 3, 1, 1)
        std = images.new_tensor(self.std).view(1, 3, 1, 1)
        return (images - mean) / std


class TappedBackbone(nn.Module):
    """timm ViT returning one fused (B, C, h, w) patch map from the configured taps."""

    def __init__(self, cfg: BackboneConfig) -> None:
        super().__init__()
        kwargs: dict = {"pretrained": cfg.pretrained, "num_classes": 0, "img_size": cfg.img_size,
                        "dynamic_img_size": True}
        for key in ("depth", "embed_dim", "num_heads", "patch_size"):
            if getattr(cfg, key) is not None:
                kwargs[key] = getattr(cfg, key)
        if cfg.checkpoint_path:
            kwargs["pretrained"] = True
            kwargs["pretrained_cfg_overlay"] = {"file": cfg.checkpoint_path}
        try:
            self.vit = timm.create_model(cfg.name, **kwargs)
        except RuntimeError as exc:  # timm raises RuntimeError for unknown names
            raise ValueError(f"backbone {cfg.name!r} cannot be created by timm: {exc}") from None
        if not hasattr(self.vit, "forward_intermediates"):
            raise ValueError(f"backbone {cfg.name!r} has no forward_intermediates; use a timm ViT")
        n_blocks = len(self.vit.blocks)
        for t in cfg.taps:
            if not -n_blocks <= t < n_blocks:
                raise ValueError(f"tap {t} is outside the {n_blocks} blocks of {cfg.name!r}")
        self.taps = sorted({t % n_blocks for t in cfg.taps})
        if len(self.taps) != len(cfg.taps):
            raise ValueError(f"taps {cfg.taps} name the same block twice")
        # blocks after the deepest tap, the final norm and the head never reach the output:
        # drop them so DDP sees no parameter without a gradient
        self.vit.prune_intermediate_layers(self.taps, prune_norm=True, prune_head=True)
        self.out_dim = int(self.vit.embed_dim)
        self.tap_norms = nn.ModuleList(nn.LayerNorm(self.out_dim) for _ in self.taps)
        self.tap_logits = nn.Parameter(torch.zeros(len(self.taps)))
        pc = self.vit.pretrained_cfg
        patch = self.vit.patch_embed.patch_size
        self.preprocessing = Preprocessing(
            mean=tuple(pc["mean"]), std=tuple(pc["std"]), interpolation=str(pc.get("interpolation", "bicubic")),
            img_size=cfg.img_size, patch_size=int(patch[0] if isinstance(patch, (tuple, list)) else patch),
            keep_aspect=cfg.keep_aspect)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Normalised images (B, 3, H, W) -> fused patch map (B, C, H/p, W/p)."""
        maps = self.vit.forward_intermediates(images, indices=self.taps, intermediates_only=True)
        weights = torch.softmax(self.tap_logits, dim=0)
        fused = 0
        for w, norm, m in zip(weights, self.tap_norms, maps):
            fused = fused + w * norm(m.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        return fused


def create_backbone(cfg: BackboneConfig) -> TappedBackbone:
    return TappedBackbone(cfg)
