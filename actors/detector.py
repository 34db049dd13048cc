"""The open-vocabulary detector (``relate.detector``) as a callable class for Ray Data and Ray Serve.

``DetectorActor`` loads the model once in ``__init__``; ``detect`` serves one image,
``detect_batch`` several in one forward pass (Ray Serve's batches), ``__call__`` a batch dict with
an ``image`` column (Ray Data ``map_batches``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from relate.detector import Detection, Detector, DetectorConfig

__all__ = ["DetectorConfig", "DetectorActor", "Detection"]


class DetectorActor(Detector):
    """``relate.detector.Detector`` plus the Ray Data batch call."""

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        """Ray Data: ``image`` column (H, W, 3 arrays) -> adds ``detections`` (list of box dicts)."""
        batch = dict(batch)
        batch["detections"] = self.detect_batch([np.asarray(im) for im in batch["image"]])
        return batch
