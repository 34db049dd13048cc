"""The zoo's feature extractor as a callable class: the model loads once in ``__init__`` and each
``__call__`` maps a column batch to features. The same class serves Ray Data ``map_batches``
(``concurrency=N``, fractional ``num_cpus``), a Serve deployment, or a plain loop in a test."""

from __future__ import annotations

from typing import Any

import numpy as np

from relate.zoo import ExtractorConfig, create_extractor, load_image

__all__ = ["FeatureExtractorActor"]


class FeatureExtractorActor:
    """Adds ``output_column`` (float32 [N, D]) to a batch.

    Reads, by the extractor's input kind: ``image`` (HWC uint8 arrays, as ``ray.data.read_images``
    yields) or else ``path`` (image files) for image models; ``label`` for text baselines.
    """

    def __init__(self, cfg: ExtractorConfig | dict[str, Any], output_column: str = "feature") -> None:
        self.cfg = cfg if isinstance(cfg, ExtractorConfig) else ExtractorConfig.model_validate(cfg)
        self.extractor = create_extractor(self.cfg)
        self.output_column = output_column

    @property
    def input_columns(self) -> tuple[str, ...]:
        return ("label",) if self.extractor.input_kind == "label" else ("image", "path")

    def _inputs(self, batch: dict[str, Any]) -> list[Any]:
        from PIL import Image

        if self.extractor.input_kind == "label":
            if "label" not in batch:
                raise KeyError(f"{self.cfg.name}: batch needs a 'label' column, has {sorted(batch)}")
            return [str(v) for v in batch["label"]]
        if "image" in batch:
            return [Image.fromarray(np.asarray(a, dtype=np.uint8)).convert("RGB") for a in batch["image"]]
        if "path" in batch:
            return [load_image(str(p)) for p in batch["path"]]
        raise KeyError(f"{self.cfg.name}: batch needs an 'image' or 'path' column, has {sorted(batch)}")

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        inputs = self._inputs(batch)
        out = dict(batch)
        out[self.output_column] = self.extractor.encode(inputs) if inputs else np.zeros((0, 0), np.float32)
        return out
