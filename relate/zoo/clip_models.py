"""open_clip visual towers (OpenAI WIT-400M and LAION-2B CLIP): image embedding only.

Seed 000 (Sec. 3.4) keeps the protocol image-only, so the text tower is never built for random
weights and is dropped after loading pretrained ones. Resolution comes from the open_clip model
config (vision_cfg.image_size) and mean/std/interpolation/resize mode from the pretrained tag's
config, through ``open_clip.image_transform``.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from relate.zoo.base import (
    ExtractorConfig, FeatureExtractor, MissingCheckpointError, PreprocessSpec, ZooEntry,
    register_entry, resolve_layer_indices,
)

__all__ = ["OpenClipExtractor"]


class OpenClipExtractor(FeatureExtractor):
    """``visual(x)``: the projected image embedding of an open_clip model."""

    def __init__(self, entry: ZooEntry, cfg: ExtractorConfig) -> None:
        import open_clip

        self.entry = entry
        self.device = torch.device(cfg.device)
        arch, tag = entry.model_id.split("/")
        model_cfg = open_clip.get_model_config(arch)
        if model_cfg is None:
            raise ValueError(f"{entry.name}: open_clip has no model config {arch!r}")
        pre_cfg = open_clip.get_pretrained_cfg(arch, tag) or {}
        vision_cfg = dict(model_cfg["vision_cfg"], **entry.options.get("vision_overrides", {}))
        quick_gelu = bool(model_cfg.get("quick_gelu", False) or pre_cfg.get("quick_gelu", False))
        torch.manual_seed(cfg.seed)
        if cfg.pretrained:
            visual = self._load_pretrained(open_clip, arch, tag, cfg, quick_gelu)
        else:
            from open_clip.model import _build_vision_tower

            visual = _build_vision_tower(model_cfg["embed_dim"], vision_cfg, quick_gelu=quick_gelu)
        self.model = visual.eval().to(self.device)
        size = vision_cfg["image_size"]
        size = (size, size) if isinstance(size, int) else tuple(size)
        mean = tuple(pre_cfg.get("mean") or open_clip.OPENAI_DATASET_MEAN)
        std = tuple(pre_cfg.get("std") or open_clip.OPENAI_DATASET_STD)
        interp = pre_cfg.get("interpolation", "bicubic")
        resize_mode = pre_cfg.get("resize_mode", "shortest")
        self.transform = open_clip.image_transform(size, is_train=False, mean=mean, std=std,
                                                   resize_mode=resize_mode, interpolation=interp)
        self.preprocess = PreprocessSpec(input_size=size, mean=mean, std=std, interpolation=interp,
                                         crop=f"{resize_mode}+center",
                                         source=f"open_clip configs of {arch} / {tag}")

    @staticmethod
    def _load_pretrained(open_clip: Any, arch: str, tag: str, cfg: ExtractorConfig,
                         quick_gelu: bool) -> torch.nn.Module:
        # open_clip accepts a local file in place of a tag (OpenAI JIT archives included).
        source = cfg.checkpoint or tag
        try:
            model = open_clip.create_model(arch, pretrained=source, force_quick_gelu=quick_gelu,
                                           require_pretrained=True)
        except Exception as exc:
            if cfg.checkpoint is not None:
                raise
            raise MissingCheckpointError(
                f"{cfg.name}: could not fetch open_clip weights {arch}/{tag} "
                f"({type(exc).__name__}: {exc}); offline, set checkpoint to a local file") from exc
        return model.visual

    def to_tensor(self, images: Sequence[Any]) -> torch.Tensor:
        return torch.stack([self.transform(im) for im in images]).to(self.device)

    @torch.inference_mode()
    def forward_tensor(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)

    def _encode_batch(self, batch: list[Any]) -> np.ndarray:
        return self.forward_tensor(self.to_tensor(batch)).float().cpu().numpy()

    @torch.inference_mode()
    def encode_layers(self, inputs: Sequence[Any], layers: Sequence[int]) -> dict[str, np.ndarray]:
        """Mean-pooled intermediate block outputs of the visual tower, keyed 'block{i}'."""
        if not hasattr(self.model, "forward_intermediates"):
            return super().encode_layers(inputs, layers)
        trunk = getattr(self.model, "transformer", None)
        n = len(trunk.resblocks) if trunk is not None else 5  # ModifiedResNet: stem + 4 stages
        take = resolve_layer_indices(layers, n, self.entry.name)
        out: dict[str, list[np.ndarray]] = {f"block{r}": [] for r in take}
        for i in range(0, len(inputs), self.batch_size):
            x = self.to_tensor(list(inputs[i:i + self.batch_size]))
            res = self.model.forward_intermediates(x, indices=take, intermediates_only=True)
            for r, f in zip(take, res["image_intermediates"]):
                out[f"block{r}"].append(f.float().mean(dim=(2, 3)).cpu().numpy())
        return {k: np.concatenate(v, axis=0) for k, v in out.items()}

    def num_params(self) -> int:
        return sum(p.numel() for p in self.model.parameters())


def _clip(name: str, arch: str, tag: str, paradigm: str, desc: str, **options: Any) -> None:
    is_conv = arch.startswith("RN")
    register_entry(ZooEntry(
        name=name, library="open_clip", model_id=f"{arch}/{tag}", paradigm=paradigm,  # type: ignore[arg-type]
        architecture="conv" if is_conv else "transformer",
        feature_layer="attention-pool projection" if is_conv else "class token projection",
        build=OpenClipExtractor, description=desc, options=options))


# OpenAI CLIP (WIT-400M) and OpenCLIP (LAION-2B) visual towers (seed 000, Table 4).
_clip("clip_openai_rn50", "RN50", "openai", "clip", "OpenAI CLIP RN50")
_clip("clip_openai_rn101", "RN101", "openai", "clip", "OpenAI CLIP RN101")
_clip("clip_openai_vit_b16", "ViT-B-16", "openai", "clip", "OpenAI CLIP ViT-B/16")
_clip("clip_openai_vit_l14", "ViT-L-14", "openai", "clip", "OpenAI CLIP ViT-L/14")
_clip("openclip_laion2b_vit_b16", "ViT-B-16", "laion2b_s34b_b88k", "clip", "OpenCLIP LAION-2B ViT-B/16")
_clip("openclip_laion2b_vit_h14", "ViT-H-14", "laion2b_s32b_b79k", "clip", "OpenCLIP LAION-2B ViT-H/14")
# Tiny random-weight tower for tests (open_clip's own config, shrunk).
_clip("test_clip_vit", "ViT-B-32", "openai", "clip", "2-layer CLIP ViT at 32 px",
      vision_overrides={"image_size": 32, "layers": 2, "width": 64, "patch_size": 8, "head_width": 32})
