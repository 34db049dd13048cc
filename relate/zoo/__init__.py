"""Feature extractors by registry name for the triplet relatedness probe (seed 000, Table 4).

``create_extractor(ExtractorConfig(name=...))`` builds any entry; ``paper_model_names()`` lists
the 20 models of the paper in table order. Preprocessing comes from each library's own config.
"""

from relate.zoo.base import (
    EXTRACTORS, ExtractorConfig, FeatureExtractor, MissingCheckpointError, PreprocessSpec,
    ZooEntry, content_hash, load_image, register_entry,
)
from relate.zoo.catalog import BASELINE_NAMES, create_extractor, paper_model_names, zoo_entry, zoo_names

__all__ = [
    "EXTRACTORS", "ExtractorConfig", "FeatureExtractor", "MissingCheckpointError",
    "PreprocessSpec", "ZooEntry", "content_hash", "create_extractor", "load_image",
    "register_entry", "zoo_entry", "zoo_names", "paper_model_names", "BASELINE_NAMES",
]
