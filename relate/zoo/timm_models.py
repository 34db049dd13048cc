"""timm backbones: the paper's supervised, DINO/DINOv2 and SSL ResNet-50 models.

Feature = ``forward_head(forward_features(x), pre_logits=True)``: the activation right before
the classifier (Sec. 3.4 of seed 000: "immediately preceding the classification head"), i.e.
global average pooling for ResNets and the normed class token for ViTs. Preprocessing comes
from ``timm.data.resolve_model_data_config`` and ``timm.data.create_transform``.
"""

from __future__ import annotations

import pickle
from typing import Any, Sequence

import numpy as np
import torch

from relate.zoo.base import (
    ExtractorConfig, FeatureExtractor, MissingCheckpointError, PreprocessSpec, ZooEntry,
    register_entry, resolve_layer_indices,
)

__all__ = ["TimmExtractor", "load_state_dict_file"]


def load_state_dict_file(path: str) -> dict[str, torch.Tensor]:
    """Read a local checkpoint and unwrap the containers the official SSL releases use."""
    if path.endswith(".safetensors"):
        from safetensors.torch import load_file

        sd: Any = load_file(path)
    else:
        # weights only: a full unpickle of a downloaded file runs whatever code it names
        try:
            sd = torch.load(path, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as exc:
            raise ValueError(f"{path}: refused to load: it holds objects other than tensors and plain containers "
                             "(a full training checkpoint?); save its state dict alone, or as .safetensors: "
                             f"{str(exc).splitlines()[0]}") from None
    for key in ("state_dict", "model", "teacher"):  # Lightning/DeiT, SwAV/VICReg, DINO
        if isinstance(sd, dict) and key in sd and isinstance(sd[key], dict):
            sd = sd[key]
    if not isinstance(sd, dict):
        raise ValueError(f"{path}: expected a state dict, found {type(sd).__name__}")
    out = {}
    for k, v in sd.items():
        for prefix in ("module.", "backbone.", "encoder."):
            if k.startswith(prefix):
                k = k[len(prefix):]
        out[k] = v
    return out


class TimmExtractor(FeatureExtractor):
    """A timm model in eval mode with the transform of its own pretrained config."""

    def __init__(self, entry: ZooEntry, cfg: ExtractorConfig) -> None:
        import timm
        import timm.data

        self.entry = entry
        self.device = torch.device(cfg.device)
        kwargs = dict(entry.options.get("model_kwargs", {}))
        overlay = entry.options.get("cfg_overlay")
        if overlay:
            kwargs["pretrained_cfg_overlay"] = dict(overlay)
        torch.manual_seed(cfg.seed)
        from_hub = cfg.pretrained and cfg.checkpoint is None
        needs = entry.options.get("checkpoint_required")
        if from_hub and needs:
            raise MissingCheckpointError(
                f"{entry.name}: no library hub provides these weights; set checkpoint to {needs}")
        try:
            model = timm.create_model(entry.model_id, pretrained=from_hub, **kwargs)
        except Exception as exc:
            if not from_hub:
                raise
            raise MissingCheckpointError(
                f"{entry.name}: could not fetch pretrained weights for timm model "
                f"{entry.model_id!r} ({type(exc).__name__}: {exc}); offline, set checkpoint to "
                f"a local weights file") from exc
        if cfg.pretrained and cfg.checkpoint is not None:
            _load_local_weights(model, cfg.checkpoint, entry.name)
        self.model = model.eval().to(self.device)
        data_cfg = timm.data.resolve_model_data_config(self.model)
        self.transform = timm.data.create_transform(**data_cfg, is_training=False)
        self.preprocess = PreprocessSpec(
            input_size=tuple(data_cfg["input_size"][1:]), mean=tuple(data_cfg["mean"]),
            std=tuple(data_cfg["std"]), interpolation=str(data_cfg["interpolation"]),
            crop=f"{data_cfg.get('crop_mode', 'center')}@{data_cfg['crop_pct']}",
            source=f"timm pretrained_cfg of {entry.model_id}",
        )

    def to_tensor(self, images: Sequence[Any]) -> torch.Tensor:
        return torch.stack([self.transform(im) for im in images]).to(self.device)

    @torch.inference_mode()
    def forward_tensor(self, x: torch.Tensor) -> torch.Tensor:
        """The pre-logits feature of an already-preprocessed batch."""
        return self.model.forward_head(self.model.forward_features(x), pre_logits=True)

    def _encode_batch(self, batch: list[Any]) -> np.ndarray:
        return self.forward_tensor(self.to_tensor(batch)).float().cpu().numpy()

    @torch.inference_mode()
    def encode_layers(self, inputs: Sequence[Any], layers: Sequence[int], pool: str = "avg") -> dict[str, np.ndarray]:
        """Pooled block outputs (timm ``forward_intermediates``), keyed 'block{i}'.

        ``pool="avg"``: the spatial mean of the block's feature map (a ViT's patch tokens, its
        class token left out). ``pool="head"``: the block output pooled the way the final readout
        pools the last one, ``forward_head(..., pre_logits=True)`` (for a ViT, the class token after
        the final norm; for a ResNet, the global average), so the last block equals ``encode``.
        """
        if pool not in ("avg", "head"):
            raise ValueError(f"{self.entry.name}: unknown layer pool {pool!r}; valid: ['avg', 'head']")
        take = resolve_layer_indices(layers, len(self.model.feature_info), self.entry.name)
        tokens = pool == "head" and hasattr(self.model, "num_prefix_tokens")  # ViT-like: pool from the tokens
        kwargs = {"output_fmt": "NLC", "return_prefix_tokens": True} if tokens else {}
        out: dict[str, list[np.ndarray]] = {f"block{r}": [] for r in take}
        for i in range(0, len(inputs), self.batch_size):
            x = self.to_tensor(list(inputs[i:i + self.batch_size]))
            feats = self.model.forward_intermediates(x, indices=take, intermediates_only=True, **kwargs)
            for r, f in zip(take, feats):
                if tokens:
                    f = self.model.forward_head(self.model.norm(torch.cat([f[1], f[0]], dim=1)), pre_logits=True)
                elif pool == "head":
                    f = self.model.forward_head(f, pre_logits=True)
                else:
                    f = f.mean(dim=(2, 3))
                out[f"block{r}"].append(f.float().cpu().numpy())
        return {k: np.concatenate(v, axis=0) for k, v in out.items()}

    def num_params(self) -> int:
        return sum(p.numel() for p in self.model.parameters())


_SSL_HEADS = ("projection_head.", "prototypes.", "projector.", "predictor.", "head.")


def _load_local_weights(model: torch.nn.Module, path: str, name: str) -> None:
    """Strict load, except the classifier: it is never used by the pre-logits feature, and SSL
    checkpoints ship without one (or with a different class count)."""
    import importlib

    sd = load_state_dict_file(path)
    filter_fn = getattr(importlib.import_module(type(model).__module__), "checkpoint_filter_fn", None)
    if filter_fn is not None:
        sd = filter_fn(sd, model)
    head = model.pretrained_cfg.get("classifier") or "head"
    heads = (head,) if isinstance(head, str) else tuple(head)
    is_head = lambda k: any(k == h or k.startswith(h + ".") for h in heads)  # noqa: E731
    own = set(model.state_dict())
    # SSL releases may carry their training heads (SwAV prototypes, DINO head, VICReg projector).
    ssl_head = lambda k: k not in own and k.startswith(_SSL_HEADS)  # noqa: E731
    sd = {k: v for k, v in sd.items() if not is_head(k) and not ssl_head(k)}
    result = model.load_state_dict(sd, strict=False)
    missing = [k for k in result.missing_keys if not is_head(k)]
    if missing or result.unexpected_keys:
        raise ValueError(
            f"{name}: checkpoint {path} does not match the model: missing {missing[:8]} "
            f"({len(missing)}), unexpected {result.unexpected_keys[:8]} "
            f"({len(result.unexpected_keys)})")


def _timm(name: str, model_id: str, paradigm: str, arch: str, desc: str, **options: Any) -> None:
    layer = "global average pool (pre-logits)" if arch == "conv" else "class token after final norm (pre-logits)"
    register_entry(ZooEntry(name=name, library="timm", model_id=model_id, paradigm=paradigm,  # type: ignore[arg-type]
                            architecture=arch, feature_layer=layer, build=TimmExtractor,  # type: ignore[arg-type]
                            description=desc, options=options))


# Supervised ImageNet models (seed 000, Table 4).
_timm("sup_resnet50", "resnet50.a1_in1k", "supervised", "conv", "ResNet-50, ImageNet-1k")
_timm("sup_resnet101", "resnet101.a1h_in1k", "supervised", "conv", "ResNet-101, ImageNet-1k")
_timm("sup_vit_b32", "vit_base_patch32_224.augreg_in21k_ft_in1k", "supervised", "transformer", "ViT-B/32")
_timm("sup_vit_b16", "vit_base_patch16_224.augreg_in21k_ft_in1k", "supervised", "transformer", "ViT-B/16")
# Self-supervised. DINOv1 ViTs and DINOv2 ship through timm's hub; the ResNet-50 SSL releases
# (DINO, SwAV, VICReg) are torchvision-layout state dicts loaded into timm's resnet50, whose
# torchvision config carries the ImageNet mean/std those releases were trained with.
_timm("dino_vit_b16", "vit_base_patch16_224.dino", "ssl", "transformer", "DINOv1 ViT-B/16")
_timm("dino_vit_b8", "vit_base_patch8_224.dino", "ssl", "transformer", "DINOv1 ViT-B/8")
# Sec. 4 of seed 000: 224 px for all but some CLIP models, so DINOv2 runs at 224 rather than
# timm's 518 default; timm interpolates the position embeddings.
_timm("dinov2_vit_b14", "vit_base_patch14_dinov2.lvd142m", "ssl", "transformer", "DINOv2 ViT-B/14",
      model_kwargs={"img_size": 224}, cfg_overlay={"input_size": (3, 224, 224)})
_timm("dinov2_vit_l14", "vit_large_patch14_dinov2.lvd142m", "ssl", "transformer", "DINOv2 ViT-L/14",
      model_kwargs={"img_size": 224}, cfg_overlay={"input_size": (3, 224, 224)})
_timm("dino_rn50", "resnet50.tv_in1k", "ssl", "conv", "DINOv1 ResNet-50",
      checkpoint_required="dino_resnet50_pretrain.pth (DINO release, facebookresearch/dino)")
_timm("swav_rn50", "resnet50.tv_in1k", "ssl", "conv", "SwAV ResNet-50",
      checkpoint_required="swav_800ep_pretrain.pth.tar (SwAV release, facebookresearch/swav)")
_timm("vicreg_rn50", "resnet50.tv_in1k", "ssl", "conv", "VICReg ResNet-50",
      checkpoint_required="resnet50.pth (VICReg release, facebookresearch/vicreg)")
# OpenCLIP has no LAION-2B ViT-L/14 at 336 px; timm hosts the LAION-2B CLIP ViT-L/14@336 tower
# (Sec. 4: "CLIP fine-tuned models are loaded through timm").
_timm("openclip_laion2b_vit_l14_336", "vit_large_patch14_clip_336.laion2b_ft_in12k_in1k", "clip",
      "transformer", "LAION-2B CLIP ViT-L/14@336 (timm)")
# Tiny random-weight variants for tests and demos (2 blocks, 32-64 px).
_timm("test_vit", "vit_tiny_patch16_224", "supervised", "transformer", "2-block ViT-Ti at 32 px",
      model_kwargs={"img_size": 32, "depth": 2}, cfg_overlay={"input_size": (3, 32, 32)})
_timm("test_resnet", "resnet10t", "supervised", "conv", "ResNet-10t at 64 px",
      cfg_overlay={"input_size": (3, 64, 64)})
