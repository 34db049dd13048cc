"""Converting a guided-diffusion (ADM) release checkpoint into a ``diffusers`` UNet folder.

``convert_adm_checkpoint("256x256_diffusion_uncond.pt", "checkpoints/adm256")`` writes the
``config.json`` + ``diffusion_pytorch_model.safetensors`` folder the ``guided_diffusion`` zoo entry
loads. The key map walks the ``UNet2DModel`` in guided-diffusion's block order (the order of
``relate.zoo.generative.adm_blocks``), so it follows whatever levels and layers the config has.
Attention ``qkv`` weights are split in the head-interleaved order of guided-diffusion's
``QKVAttentionLegacy`` (the release models' ``use_new_attention_order=False``).

Checked against guided-diffusion's own ``UNetModel`` (commit 22e0df8) on a small random-weight
config with ADM-256's flags: the two networks' outputs agree to float precision.

    python -m relate.zoo.adm_checkpoint SRC.pt OUT_FOLDER
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch

from relate.zoo.generative import ADM_256_UNCOND

__all__ = ["convert_adm_state_dict", "convert_adm_checkpoint"]

_RESNET = {"in_layers.0": "norm1", "in_layers.2": "conv1", "emb_layers.1": "time_emb_proj",
           "out_layers.0": "norm2", "out_layers.3": "conv2", "skip_connection": "conv_shortcut"}


def convert_adm_state_dict(sd: dict[str, torch.Tensor], unet: torch.nn.Module) -> dict[str, torch.Tensor]:
    """``sd`` (guided-diffusion ``UNetModel`` keys) renamed and reshaped for ``unet`` (a ``UNet2DModel``).

    Every source key must be used and every target key filled; otherwise a ``ValueError`` names
    the leftovers (a checkpoint of another architecture, or a config that does not match it).
    """
    src = dict(sd)
    out: dict[str, torch.Tensor] = {}

    def plain(dst: str, old: str) -> None:
        for p in ("weight", "bias"):
            if f"{old}.{p}" in src:
                out[f"{dst}.{p}"] = src.pop(f"{old}.{p}")

    def resnet(dst: str, old: str) -> None:
        for o, d in _RESNET.items():
            plain(f"{dst}.{d}", f"{old}.{o}")

    def attention(dst: str, old: str, module: torch.nn.Module) -> None:
        plain(f"{dst}.group_norm", f"{old}.norm")
        if not {f"{old}.{n}.{p}" for n in ("qkv", "proj_out") for p in ("weight", "bias")} <= set(src):
            return  # reported below as unfilled targets
        heads = module.heads
        w, b = src.pop(f"{old}.qkv.weight")[..., 0], src.pop(f"{old}.qkv.bias")
        ch = w.shape[0] // (3 * heads)
        # QKVAttentionLegacy: rows are [head0 q, k, v, head1 q, k, v, ...], ch rows each.
        w, b = w.reshape(heads, 3, ch, -1), b.reshape(heads, 3, ch)
        for i, name in enumerate(("to_q", "to_k", "to_v")):
            out[f"{dst}.{name}.weight"] = w[:, i].reshape(heads * ch, -1)
            out[f"{dst}.{name}.bias"] = b[:, i].reshape(-1)
        out[f"{dst}.to_out.0.weight"] = src.pop(f"{old}.proj_out.weight")[..., 0]
        out[f"{dst}.to_out.0.bias"] = src.pop(f"{old}.proj_out.bias")

    def layer(dst: str, old: str, block: torch.nn.Module, j: int) -> None:
        resnet(f"{dst}.resnets.{j}", f"{old}.0")
        if getattr(block, "attentions", None) is not None:
            attention(f"{dst}.attentions.{j}", f"{old}.1", block.attentions[j])

    plain("time_embedding.linear_1", "time_embed.0")
    plain("time_embedding.linear_2", "time_embed.2")
    plain("conv_in", "input_blocks.0.0")
    k = 1
    for i, down in enumerate(unet.down_blocks):
        for j in range(len(down.resnets)):
            layer(f"down_blocks.{i}", f"input_blocks.{k}", down, j)
            k += 1
        if getattr(down, "downsamplers", None):
            resnet(f"down_blocks.{i}.downsamplers.0", f"input_blocks.{k}.0")
            k += 1
    resnet("mid_block.resnets.0", "middle_block.0")
    attention("mid_block.attentions.0", "middle_block.1", unet.mid_block.attentions[0])
    resnet("mid_block.resnets.1", "middle_block.2")
    k = 0
    for i, up in enumerate(unet.up_blocks):
        n = len(up.resnets)
        for j in range(n):
            layer(f"up_blocks.{i}", f"output_blocks.{k}", up, j)
            if j == n - 1 and getattr(up, "upsamplers", None):
                at = 2 if getattr(up, "attentions", None) is not None else 1
                resnet(f"up_blocks.{i}.upsamplers.0", f"output_blocks.{k}.{at}")
            k += 1
    plain("conv_norm_out", "out.0")
    plain("conv_out", "out.2")
    own = unet.state_dict()
    missing = sorted(set(own) - set(out))
    bad = sorted(n for n, v in out.items() if n in own and own[n].shape != v.shape)
    if src or missing or bad:
        raise ValueError(f"checkpoint does not match the UNet config: unused {sorted(src)[:8]} ({len(src)}), "
                         f"unfilled {missing[:8]} ({len(missing)}), shape mismatches {bad[:8]} ({len(bad)})")
    return out


def convert_adm_checkpoint(src: str | Path, out_dir: str | Path,
                           unet_config: dict[str, Any] | None = None) -> Path:
    """Read a guided-diffusion ``.pt`` state dict (tensors only), convert it and write
    ``config.json`` + ``diffusion_pytorch_model.safetensors`` under ``out_dir``."""
    from diffusers import UNet2DModel

    sd = torch.load(src, map_location="cpu", weights_only=True)
    unet = UNet2DModel(**(unet_config or ADM_256_UNCOND))
    unet.load_state_dict(convert_adm_state_dict({k: v.float() for k, v in sd.items()}, unet), strict=True)
    unet.save_pretrained(out_dir, safe_serialization=True)
    return Path(out_dir)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", help="guided-diffusion checkpoint, e.g. 256x256_diffusion_uncond.pt")
    ap.add_argument("out_dir", help="folder to write config.json + diffusion_pytorch_model.safetensors to")
    args = ap.parse_args()
    print(convert_adm_checkpoint(args.src, args.out_dir))
