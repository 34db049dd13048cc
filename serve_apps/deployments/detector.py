"""Detector deployment: an open-vocabulary detector (``actors.detector.DetectorActor``) behind Serve.

In ``none`` mode the replica loads nothing and the graph endpoint answers 422, so a deployment
that only serves client-given regions costs no detector memory.
"""

from __future__ import annotations

import asyncio
from typing import Any, Sequence

import numpy as np
from ray import serve

from actors.detector import DetectorActor, DetectorConfig

__all__ = ["DetectorDeployment"]


@serve.deployment(name="Detector")
class DetectorDeployment:
    def __init__(self, cfg: DetectorConfig | dict[str, Any]) -> None:
        self.actor = DetectorActor(cfg)

    def info(self) -> dict:
        return {"enabled": self.actor.enabled, "model": self.actor.cfg.model, "family": self.actor.family}

    def check_health(self) -> None:
        if self.actor.cfg.mode != "none" and self.actor.model is None:
            raise RuntimeError("detector weights not loaded")

    async def detect(self, image: np.ndarray, queries: Sequence[str] | None = None, threshold: float | None = None,
                     max_boxes: int | None = None) -> list[dict]:
        # the forward pass is blocking; a worker thread keeps health checks answered meanwhile
        return await asyncio.to_thread(self.actor.detect, image, queries, threshold, max_boxes)
