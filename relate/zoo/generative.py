"""Generative representations: Guided Diffusion (ADM) on ``diffusers``, and BigBiGAN's refusal.

Seed 000 (Sec. 3.4) reads Guided Diffusion as Mukhopadhyay et al. (2023) do: noise the image to
step t (t = 90), run the UNet, take the activation of block 24 and pool it over space; its Sec. 5
reports a timestep sweep (46.0-50.5% on POPORO). Here the ADM UNet is a ``diffusers``
``UNet2DModel`` loaded from a converted release checkpoint (a folder holding ``config.json`` and
``diffusion_pytorch_model.safetensors``), the noise comes from ``DDPMScheduler.add_noise`` with
ADM's linear 1000-step schedule, and the block is read with a forward hook.
``relate.zoo.adm_checkpoint`` writes that folder from the release's ``.pt`` file.

Block indices follow guided-diffusion's own numbering (``input_blocks``, ``middle_block``,
``output_blocks`` concatenated), mapped onto diffusers' modules by ``adm_blocks``: ``conv_in``;
then per down block each layer (its attention if it has one, else its resnet) and its
downsampler; the mid block; then per up block each layer, the level's last layer ending at its
upsampler. ADM-256 has 18 + 1 + 18 = 37 blocks, and block 24 is ``up_blocks.1.upsamplers.0``
(1024 channels at 32x32).

BigBiGAN has no PyTorch release and no loader here: its entry refuses, naming the release and
the output the paper reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from relate.zoo.base import (
    ExtractorConfig, FeatureExtractor, MissingCheckpointError, PreprocessSpec, ZooEntry,
    register_entry, resolve_layer_indices,
)

__all__ = ["DiffusionUNetExtractor", "BigBiGANEncoder", "adm_blocks", "ADM_256_UNCOND",
           "ADM_LINEAR_SCHEDULE", "UNET_FILES"]

# The files a converted diffusers UNet folder holds (what ``UNet2DModel.save_pretrained`` writes).
UNET_FILES = ("config.json", "diffusion_pytorch_model.safetensors")

# openai/guided-diffusion 256x256_diffusion_uncond.pt as UNet2DModel arguments: model_channels 256,
# channel_mult (1, 1, 2, 2, 4, 4), num_res_blocks 2, attention at 32/16/8 px, 64 channels per
# head, resblock_updown, use_scale_shift_norm, learn_sigma (6 output channels).
ADM_256_UNCOND: dict[str, Any] = {
    "sample_size": 256, "in_channels": 3, "out_channels": 6, "layers_per_block": 2,
    "block_out_channels": (256, 256, 512, 512, 1024, 1024), "attention_head_dim": 64,
    "down_block_types": ("ResnetDownsampleBlock2D",) * 3 + ("AttnDownBlock2D",) * 3,
    "up_block_types": ("AttnUpBlock2D",) * 3 + ("ResnetUpsampleBlock2D",) * 3,
    "resnet_time_scale_shift": "scale_shift", "downsample_type": "resnet", "upsample_type": "resnet",
    # diffusers drops the mid attention's GroupNorm under scale_shift unless this is set; ADM has it.
    "attn_norm_num_groups": 32,
}
# ADM's `noise_schedule linear` with `diffusion_steps 1000` (betas 1e-4 .. 0.02).
ADM_LINEAR_SCHEDULE: dict[str, Any] = {
    "num_train_timesteps": 1000, "beta_schedule": "linear", "beta_start": 1e-4, "beta_end": 0.02,
}


class _StopForward(Exception):
    """Raised by the last hook: the blocks after the one read are never computed."""


def adm_blocks(unet: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """A ``UNet2DModel``'s blocks in guided-diffusion's order, as (module path, module) pairs.

    Each entry is the module whose output is that ADM block's output (see the module docstring).
    """
    blocks: list[tuple[str, torch.nn.Module]] = [("conv_in", unet.conv_in)]
    for i, down in enumerate(unet.down_blocks):
        _check_layout(down, f"down_blocks.{i}")
        for j in range(len(down.resnets)):
            blocks.append(_layer(down, f"down_blocks.{i}", j))
        if getattr(down, "downsamplers", None):
            blocks.append((f"down_blocks.{i}.downsamplers.0", down.downsamplers[0]))
    if unet.mid_block is not None:
        blocks.append(("mid_block", unet.mid_block))
    for i, up in enumerate(unet.up_blocks):
        _check_layout(up, f"up_blocks.{i}")
        n = len(up.resnets)
        for j in range(n):
            if j == n - 1 and getattr(up, "upsamplers", None):
                blocks.append((f"up_blocks.{i}.upsamplers.0", up.upsamplers[0]))
            else:
                blocks.append(_layer(up, f"up_blocks.{i}", j))
    return blocks


def _layer(block: torch.nn.Module, path: str, j: int) -> tuple[str, torch.nn.Module]:
    attns = getattr(block, "attentions", None)
    if attns is not None:
        return f"{path}.attentions.{j}", attns[j]
    return f"{path}.resnets.{j}", block.resnets[j]


def _check_layout(block: torch.nn.Module, path: str) -> None:
    # Skip/K-style blocks carry extra paths (skip_conv, resnet_down...) with no ADM counterpart.
    extra = [n for n, _ in block.named_children()
             if n not in ("resnets", "attentions", "downsamplers", "upsamplers")]
    if extra or getattr(block, "attentions", None) is not None and len(block.attentions) != len(block.resnets):
        raise ValueError(f"{path} ({type(block).__name__}) has no guided-diffusion block layout "
                         f"(children {[n for n, _ in block.named_children()]}); supported: ResnetDownsampleBlock2D, "
                         "DownBlock2D, AttnDownBlock2D, ResnetUpsampleBlock2D, UpBlock2D, AttnUpBlock2D")


def _checkpoint_folder(entry: ZooEntry, cfg: ExtractorConfig) -> Path:
    """The converted UNet folder named by ``cfg.checkpoint`` (the folder or a file inside it)."""
    need = " + ".join(UNET_FILES)
    if cfg.checkpoint is None:
        raise MissingCheckpointError(
            f"{entry.name}: needs a diffusers UNet2DModel folder holding {need}, converted from "
            f"{entry.options['release']}; set checkpoint to that folder (or to its {UNET_FILES[1]})")
    path = Path(cfg.checkpoint)
    folder = path if path.is_dir() else path.parent
    missing = [str(folder / f) for f in UNET_FILES if not (folder / f).is_file()]
    if missing:
        raise MissingCheckpointError(
            f"{entry.name}: checkpoint {cfg.checkpoint} lacks {missing}; the folder must hold {need} "
            f"(UNet2DModel.save_pretrained of the converted {entry.options['release']})")
    return folder


class DiffusionUNetExtractor(FeatureExtractor):
    """An ADM-style ``UNet2DModel`` read at one block and one noise step, pooled over space.

    The noise is one draw of ``torch.randn`` from a generator seeded with ``cfg.seed``, shared by
    every image, so a feature depends on the image, t, the block and the seed alone, never on
    which images share its batch (the probe caches features by image content).
    """

    def __init__(self, entry: ZooEntry, cfg: ExtractorConfig) -> None:
        from diffusers import DDPMScheduler, UNet2DModel

        self.entry = entry
        self.device = torch.device(cfg.device)
        opts = entry.options
        if cfg.pretrained:
            folder = _checkpoint_folder(entry, cfg)
            unet = UNet2DModel.from_pretrained(str(folder), local_files_only=True, use_safetensors=True)
            source = f"{folder / UNET_FILES[0]}"
        else:
            torch.manual_seed(cfg.seed)
            unet = UNet2DModel(**opts["unet_config"])
            source = f"{entry.name} unet_config (random weights)"
        self.unet = unet.eval().to(self.device)
        self.scheduler = DDPMScheduler(**opts["schedule"])
        self.blocks = adm_blocks(self.unet)
        self.block = resolve_layer_indices([opts["block"]], len(self.blocks), entry.name)[0]
        self.timestep = self._check_timesteps([opts["timestep"]])[0]
        size = self.unet.config.sample_size
        h, w = (size, size) if isinstance(size, int) else tuple(size)
        self.preprocess = PreprocessSpec(
            input_size=(h, w), mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5), interpolation="bicubic",
            crop="center@1.0", source=f"{source} (sample_size; ADM scales pixels to [-1, 1])")
        gen = torch.Generator().manual_seed(cfg.seed)
        self.noise = torch.randn((self.unet.config.in_channels, h, w), generator=gen).to(self.device)

    @property
    def block_names(self) -> list[str]:
        """Module path of each block, by ADM index."""
        return [name for name, _ in self.blocks]

    def to_tensor(self, images: Sequence[Any]) -> torch.Tensor:
        """Shorter side resized (bicubic) and centre-cropped to sample_size, scaled to [-1, 1]."""
        from torchvision.transforms import functional as F

        h, w = self.preprocess.input_size
        out = []
        for im in images:
            im = F.resize(im, min(h, w), interpolation=F.InterpolationMode.BICUBIC)
            out.append(F.to_tensor(F.center_crop(im, [h, w])) * 2 - 1)
        return torch.stack(out).to(self.device)

    @torch.inference_mode()
    def forward_tensor(self, x: torch.Tensor, timesteps: Sequence[int],
                       blocks: Sequence[int]) -> dict[tuple[int, int], torch.Tensor]:
        """Pooled activations of ``blocks`` for ``x`` (in [-1, 1]) noised to each t: {(t, block): [N, C]}."""
        grabbed: dict[int, torch.Tensor] = {}
        last = max(blocks)

        def hook(idx: int):
            def read(_module: torch.nn.Module, _args: Any, output: Any) -> None:
                out = output[0] if isinstance(output, tuple) else output
                grabbed[idx] = out.float().mean(dim=(2, 3))  # spatial average pool
                if idx == last:
                    raise _StopForward
            return read

        handles = [self.blocks[b][1].register_forward_hook(hook(b)) for b in blocks]
        out: dict[tuple[int, int], torch.Tensor] = {}
        try:
            for t in timesteps:
                tt = torch.full((x.shape[0],), t, dtype=torch.long, device=x.device)
                xt = self.scheduler.add_noise(x, self.noise.expand_as(x), tt)  # q(x_t | x_0)
                grabbed.clear()
                try:
                    self.unet(xt, tt)
                except _StopForward:
                    pass
                out |= {(t, b): grabbed[b] for b in blocks}
        finally:
            for h in handles:
                h.remove()
        return out

    def _encode_batch(self, batch: list[Any]) -> np.ndarray:
        x = self.to_tensor(batch)
        return self.forward_tensor(x, [self.timestep], [self.block])[(self.timestep, self.block)].cpu().numpy()

    def encode_layers(self, inputs: Sequence[Any], layers: Sequence[int]) -> dict[str, np.ndarray]:
        """Pooled activations of several blocks at the entry's timestep, keyed 'block{i}'."""
        take = resolve_layer_indices(layers, len(self.blocks), self.entry.name)
        feats = self._sweep(inputs, [self.timestep], take)
        return {f"block{b}": feats[(self.timestep, b)] for b in take}

    def encode_timesteps(self, inputs: Sequence[Any], timesteps: Sequence[int],
                         layers: Sequence[int] | None = None) -> dict[str, np.ndarray]:
        """A timestep sweep: features per t (one UNet pass each), keyed 't{t}' at the entry's
        block, or 't{t}/block{i}' when ``layers`` are given."""
        ts = self._check_timesteps(timesteps)
        take = resolve_layer_indices(layers, len(self.blocks), self.entry.name) if layers else [self.block]
        feats = self._sweep(inputs, ts, take)
        if layers:
            return {f"t{t}/block{b}": feats[(t, b)] for t in ts for b in take}
        return {f"t{t}": feats[(t, self.block)] for t in ts}

    def num_params(self) -> int:
        return sum(p.numel() for p in self.unet.parameters())

    def _sweep(self, inputs: Sequence[Any], ts: list[int], blocks: list[int]) -> dict[tuple[int, int], np.ndarray]:
        if len(inputs) == 0:
            raise ValueError(f"{self.entry.name}: got an empty batch")
        parts: dict[tuple[int, int], list[np.ndarray]] = {}
        for i in range(0, len(inputs), self.batch_size):
            got = self.forward_tensor(self.to_tensor(list(inputs[i:i + self.batch_size])), ts, blocks)
            for k, v in got.items():
                parts.setdefault(k, []).append(v.cpu().numpy())
        return {k: np.concatenate(v, axis=0).astype(np.float32, copy=False) for k, v in parts.items()}

    def _check_timesteps(self, timesteps: Sequence[int]) -> list[int]:
        n = self.scheduler.config.num_train_timesteps
        bad = [t for t in timesteps if not 0 <= int(t) < n]
        if bad or not timesteps:
            raise ValueError(f"{self.entry.name}: timesteps {list(timesteps)} must be non-empty and in [0, {n})")
        return list(dict.fromkeys(int(t) for t in timesteps))


class BigBiGANEncoder(FeatureExtractor):
    """Refuses to build: BigBiGAN's encoder is released for TF-Hub only, and no converted
    PyTorch port is loaded here; the message names the release and the output to read."""

    def __init__(self, entry: ZooEntry, cfg: ExtractorConfig) -> None:
        self.entry = entry
        raise MissingCheckpointError(
            f"{entry.name}: needs {entry.options['release']}, read at its '{entry.options['output']}' "
            f"output; no PyTorch port of that encoder exists in this zoo, so neither random weights "
            f"nor a checkpoint ({cfg.checkpoint}) can be built")

    def _encode_batch(self, batch: list[Any]) -> np.ndarray:  # pragma: no cover - never built
        raise AssertionError("unreachable")


def _diffusion(name: str, desc: str, **options: Any) -> None:
    block, t = options["block"], options["timestep"]
    register_entry(ZooEntry(
        name=name, library="diffusers", model_id=options["release"], paradigm="generative",  # type: ignore[arg-type]
        architecture="conv", feature_layer=f"UNet block {block} (guided-diffusion numbering) at noise step t={t}, "
        "spatially average-pooled", build=DiffusionUNetExtractor, description=desc,
        options={"schedule": ADM_LINEAR_SCHEDULE, "checkpoint_is_folder": True, **options}))


# Seed 000, Sec. 3.4: block 24 at t=90 (following Mukhopadhyay et al., 2023).
_diffusion("guided_diffusion", "Guided Diffusion (ADM) 256x256 unconditional", block=24, timestep=90,
           release="256x256_diffusion_uncond.pt (openai/guided-diffusion release)", unet_config=ADM_256_UNCOND)
register_entry(ZooEntry(
    name="bigbigan", library="adapter", model_id="BigBiGAN ResNet-50 encoder",
    paradigm="generative", architecture="conv", feature_layer="encoder output (pooled)",
    build=BigBiGANEncoder, description="BigBiGAN",
    options={"release": "the BigBiGAN ResNet-50 encoder (TF-Hub module deepmind/bigbigan-resnet50/1, "
                        "signature 'encode', 256x256 images in [-1, 1])", "output": "avepool_feat"}))
# Tiny random-weight variant for tests and demos: 2 levels, 32 px, the ADM block layout (9 blocks).
_diffusion("test_adm_unet", "2-level ADM-style UNet at 32 px", block=5, timestep=90,
           release="a 2-level ADM-style UNet (tests only)",
           unet_config={**ADM_256_UNCOND, "sample_size": 32, "layers_per_block": 1, "block_out_channels": (32, 64),
                        "attention_head_dim": 16, "down_block_types": ("ResnetDownsampleBlock2D", "AttnDownBlock2D"),
                        "up_block_types": ("AttnUpBlock2D", "ResnetUpsampleBlock2D")})
