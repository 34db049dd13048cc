"""The feature-extractor interface, its config and the one registry of named extractors.

A zoo entry says where a model comes from (library and id), which paradigm and architecture
family it belongs to (used by the Fig. 4 scatter) and which layer gives its feature. The
preprocessing (resolution, mean/std, interpolation, crop) is read from the library's own
pretrained config when the extractor is built, never typed in here.

This module imports no entry: each registrant module (``baselines``, ``clip_models``,
``generative``, ``timm_models``) imports it and adds its own, and ``relate.zoo.catalog``, which
imports them all, is where names are looked up.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Sequence

import numpy as np
from pydantic import Field

from relate.config import StrictConfig
from relate.registry import Registry

__all__ = [
    "EXTRACTORS", "ZooEntry", "ExtractorConfig", "FeatureExtractor", "PreprocessSpec",
    "MissingCheckpointError", "register_entry", "load_image", "content_hash", "resolve_layer_indices",
]

Paradigm = Literal["supervised", "ssl", "clip", "generative", "baseline", "text"]
InputKind = Literal["image", "label"]


class MissingCheckpointError(RuntimeError):
    """An extractor needs weights (or a package) that are not available on this machine."""


class ExtractorConfig(StrictConfig):
    """How to build one extractor from the zoo."""

    name: str = Field(description="registry name of the extractor, e.g. 'sup_vit_b16' or 'pixels'")
    pretrained: bool = Field(
        default=True,
        description="load the entry's pretrained weights (from `checkpoint` when set, else the "
        "library's hub); False builds random weights (tests, benchmarks)",
    )
    checkpoint: str | None = Field(
        default=None, description="local weights file; required offline when pretrained is true"
    )
    device: str = Field(default="cpu", description="torch device the model runs on")
    batch_size: int = Field(default=32, ge=1, description="images per forward pass")
    seed: int = Field(default=0, description="torch seed for random-weight builds (stable caches)")


@dataclass(frozen=True)
class PreprocessSpec:
    """What an extractor does to a PIL image before its forward pass (for reports and tests)."""

    input_size: tuple[int, int]
    mean: tuple[float, ...] | None
    std: tuple[float, ...] | None
    interpolation: str
    crop: str
    source: str  # which library config these values were read from

    def to_dict(self) -> dict[str, Any]:
        return {"input_size": list(self.input_size), "mean": self.mean, "std": self.std,
                "interpolation": self.interpolation, "crop": self.crop, "source": self.source}


class FeatureExtractor:
    """Maps a batch of inputs (PIL images, or class-name strings for text baselines) to features.

    Subclasses set ``entry``, ``preprocess`` and implement ``_encode_batch``; ``encode`` chunks
    by ``batch_size`` so callers never hold a whole dataset's tensors at once.
    """

    entry: "ZooEntry"
    preprocess: PreprocessSpec | None = None
    batch_size: int = 32

    @property
    def input_kind(self) -> InputKind:
        return self.entry.input_kind

    @property
    def feature_layer(self) -> str:
        return self.entry.feature_layer

    def encode(self, inputs: Sequence[Any]) -> np.ndarray:
        """Features of ``inputs`` as a float32 array [N, D]."""
        if len(inputs) == 0:
            raise ValueError(f"{self.entry.name}: encode() got an empty batch")
        chunks = [self._encode_batch(list(inputs[i:i + self.batch_size]))
                  for i in range(0, len(inputs), self.batch_size)]
        return np.concatenate(chunks, axis=0).astype(np.float32, copy=False)

    def encode_layers(self, inputs: Sequence[Any], layers: Sequence[int]) -> dict[str, np.ndarray]:
        """Pooled features of intermediate blocks for a layer sweep, keyed 'block{i}'."""
        raise NotImplementedError(
            f"{self.entry.name}: layer sweeps are not supported by this extractor "
            f"(library {self.entry.library!r})"
        )

    def num_params(self) -> int:
        return 0

    def _encode_batch(self, batch: list[Any]) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError


@dataclass(frozen=True)
class ZooEntry:
    """One named extractor: its source, its place in the paper's taxonomy and its builder."""

    name: str
    library: str  # timm | open_clip | baseline | sentence_transformers | adapter
    model_id: str  # library model name (timm name, open_clip 'arch/tag', ...)
    paradigm: Paradigm
    architecture: Literal["conv", "transformer", "none"]
    feature_layer: str
    build: Callable[["ZooEntry", ExtractorConfig], FeatureExtractor]
    input_kind: InputKind = "image"
    description: str = ""
    options: dict[str, Any] = field(default_factory=dict)  # builder-specific, fixed per entry

    def summary(self) -> dict[str, Any]:
        return {"name": self.name, "library": self.library, "model_id": self.model_id,
                "paradigm": self.paradigm, "architecture": self.architecture,
                "feature_layer": self.feature_layer, "input_kind": self.input_kind}


EXTRACTORS: Registry[ZooEntry] = Registry("feature extractor")


def register_entry(entry: ZooEntry) -> ZooEntry:
    """Add ``entry`` to the zoo under its own name (duplicates are refused by the registry)."""
    return EXTRACTORS.register(entry.name)(entry)


def load_image(path: str | Path):
    """Open an image file as RGB (palette, grey and alpha images are converted)."""
    from PIL import Image

    with Image.open(path) as im:
        return im.convert("RGB")


def content_hash(data: bytes | str) -> str:
    """Stable key of an input's content (image file bytes, or a label string)."""
    if isinstance(data, str):
        data = ("label:" + data).encode("utf-8")
    return hashlib.sha1(data).hexdigest()


def resolve_layer_indices(layers: Sequence[int], n: int, name: str) -> list[int]:
    """Absolute, sorted block indices (libraries return intermediates in ascending order)."""
    resolved = [i + n if i < 0 else i for i in layers]
    bad = [i for i, r in zip(layers, resolved) if not 0 <= r < n]
    if bad:
        raise ValueError(f"{name}: layer indices {bad} out of range for {n} blocks")
    return sorted(set(resolved))
