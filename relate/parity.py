"""Parity of an exported graph with torch: the check behind ``relate export --check``.

It loads the checkpoint twice through ``relate.api`` (torch, and the exported graph's runtime),
so it sits above both ``relate.api`` and ``relate.export``; the exporter itself never loads a
predictor.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from relate.api import load_model
from relate.model.score import relation_score

__all__ = ["parity_check"]


def parity_check(checkpoint: str | Path, onnx_path: str | Path | None = None, vocabulary=None, n_boxes: int = 6,
                 seed: int = 0, runtime: str = "onnxruntime", ir_path: str | Path | None = None) -> float:
    """Largest |score| difference (Eq. 6, every kept pair x predicate) between ``runtime`` (onnxruntime or
    openvino) and torch on a random image with ``n_boxes`` random boxes; the kept pairs must be the same ones."""
    ref = load_model(checkpoint)
    ort = load_model(checkpoint, runtime=runtime, onnx_path=onnx_path, ir_path=ir_path)
    rng = np.random.default_rng(seed)
    h, w = 240, 320
    image = (rng.random((h, w, 3)) * 255).astype(np.uint8)
    xy = rng.random((n_boxes, 2)) * [w * 0.7, h * 0.7]
    boxes = np.concatenate([xy, xy + 8 + rng.random((n_boxes, 2)) * [w * 0.3, h * 0.3]], 1)
    a = ref.score_images([image], [boxes], vocabulary)[0]
    b = ort.score_images([image], [boxes], vocabulary)[0]
    if a.pairs.shape != b.pairs.shape or not (a.pairs == b.pairs).all():
        return float("inf")
    w_pair = ref.model.cfg.pair_weight
    return float(np.abs(relation_score(a.l_pred, a.l_pair, w_pair, ref.calibration)
                        - relation_score(b.l_pred, b.l_pair, w_pair, ref.calibration)).max())
