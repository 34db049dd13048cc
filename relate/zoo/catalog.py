"""The full zoo: every registrant module imported, then lookups by name.

Lookups live here rather than in ``relate.zoo.base`` because they must see every entry, and the
registrant modules import ``base``; a lookup in ``base`` would have to import them back.
"""

from __future__ import annotations

from pathlib import Path

# Imported for their side effect: each module registers its entries in EXTRACTORS.
from relate.zoo import baselines, clip_models, generative, timm_models  # noqa: F401
from relate.zoo.base import EXTRACTORS, ExtractorConfig, FeatureExtractor, MissingCheckpointError, ZooEntry

__all__ = ["zoo_entry", "create_extractor", "zoo_names", "paper_model_names", "BASELINE_NAMES"]

# Table 4 of seed 000, in its order: supervised (4), SSL (7), CLIP (7), generative (2).
_PAPER_MODELS = (
    "sup_resnet50", "sup_resnet101", "sup_vit_b32", "sup_vit_b16",
    "vicreg_rn50", "swav_rn50", "dino_rn50", "dino_vit_b16", "dino_vit_b8",
    "dinov2_vit_b14", "dinov2_vit_l14",
    "clip_openai_rn50", "clip_openai_rn101", "clip_openai_vit_b16", "clip_openai_vit_l14",
    "openclip_laion2b_vit_b16", "openclip_laion2b_vit_l14_336", "openclip_laion2b_vit_h14",
    "guided_diffusion", "bigbigan",
)
BASELINE_NAMES = ("pixels", "color_hist", "text_minilm")


def zoo_entry(name: str) -> ZooEntry:
    """Look up an entry; unknown names raise an error listing every valid name."""
    return EXTRACTORS.get(name)


def create_extractor(cfg: ExtractorConfig | str) -> FeatureExtractor:
    """Build the extractor named by ``cfg`` (a name alone means random weights on CPU)."""
    if isinstance(cfg, str):
        cfg = ExtractorConfig(name=cfg, pretrained=False)
    entry = zoo_entry(cfg.name)
    if cfg.checkpoint is not None:
        path = Path(cfg.checkpoint)
        # Converted diffusers models are folders (config.json beside the weights).
        if not (path.is_file() or (entry.options.get("checkpoint_is_folder") and path.is_dir())):
            raise MissingCheckpointError(f"{cfg.name}: checkpoint file not found: {cfg.checkpoint}")
    extractor = entry.build(entry, cfg)
    extractor.batch_size = cfg.batch_size
    return extractor


def zoo_names() -> list[str]:
    """Every registered extractor name."""
    return EXTRACTORS.names()


def paper_model_names() -> tuple[str, ...]:
    """The paper's 20 models in Table 4 order."""
    return _PAPER_MODELS
