"""Feature extractors by registry name for the triplet relatedness probe (seed 000, Table 4).

``create_extractor(ExtractorConfig(name=...))`` builds any entry; ``paper_model_names()`` lists
the 20 models of the paper in table order. Preprocessing comes from each library's own config.
"""

from relate.zoo.base import (
    EXTRACTORS, ExtractorConfig, FeatureExtractor, MissingCheckpointError, PreprocessSpec,
    ZooEntry, content_hash, create_extractor, load_image, register_entry, zoo_entry,
)

__all__ = [
    "EXTRACTORS", "ExtractorConfig", "FeatureExtractor", "MissingCheckpointError",
    "PreprocessSpec", "ZooEntry", "content_hash", "create_extractor", "load_image",
    "register_entry", "zoo_entry", "zoo_names", "paper_model_names", "BASELINE_NAMES",
]

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


def zoo_names() -> list[str]:
    """Every registered extractor name."""
    from relate.zoo.base import _ensure_loaded

    _ensure_loaded()
    return EXTRACTORS.names()


def paper_model_names() -> tuple[str, ...]:
    """The paper's 20 models in Table 4 order."""
    return _PAPER_MODELS
