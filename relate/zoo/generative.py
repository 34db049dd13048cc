"""Generative representations (Guided Diffusion, BigBiGAN): adapter entries only.

No pip-installable library ships these models with weights, so the entries exist to say exactly
what to provide. Seed 000 (Sec. 3.4) reads Guided Diffusion at block 24 with noise step t=90 and
BigBiGAN at its encoder output; those choices are recorded on the entry so a future adapter
implements the same readout.
"""

from __future__ import annotations

import importlib.util

from relate.zoo.base import ExtractorConfig, FeatureExtractor, MissingCheckpointError, ZooEntry, register_entry

__all__ = ["GenerativeAdapter"]


class GenerativeAdapter(FeatureExtractor):
    """Refuses to build, naming the checkpoint and package the model needs."""

    def __init__(self, entry: ZooEntry, cfg: ExtractorConfig) -> None:
        self.entry = entry
        need_ckpt, package = entry.options["checkpoint"], entry.options["package"]
        if cfg.checkpoint is None or not cfg.pretrained:
            raise MissingCheckpointError(
                f"{entry.name}: needs the checkpoint {need_ckpt} (set checkpoint=PATH); random "
                f"weights are not meaningful for this adapter")
        if importlib.util.find_spec(package) is None:
            raise MissingCheckpointError(
                f"{entry.name}: checkpoint given, but the {package!r} package that defines the "
                f"network is not installed")
        raise NotImplementedError(
            f"{entry.name}: the feature readout ({entry.feature_layer}) is not implemented yet; "
            f"checkpoint {cfg.checkpoint} and package {package!r} are present")


register_entry(ZooEntry(
    name="guided_diffusion", library="adapter", model_id="guided-diffusion 256x256 unconditional",
    paradigm="generative", architecture="conv",
    feature_layer="UNet block 24 activation at noise step t=90, spatially pooled",
    build=GenerativeAdapter, description="Guided Diffusion (ADM)",
    options={"checkpoint": "256x256_diffusion_uncond.pt (openai/guided-diffusion release)",
             "package": "guided_diffusion"}))
register_entry(ZooEntry(
    name="bigbigan", library="adapter", model_id="BigBiGAN ResNet-50 encoder",
    paradigm="generative", architecture="conv", feature_layer="encoder output (pooled)",
    build=GenerativeAdapter, description="BigBiGAN",
    options={"checkpoint": "the BigBiGAN RevNet/ResNet-50 encoder export (TF-Hub "
                           "deepmind/bigbigan-resnet50/1, converted to a local file)",
             "package": "tensorflow_hub"}))
