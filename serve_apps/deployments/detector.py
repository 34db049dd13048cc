"""Detector deployment: an open-vocabulary detector (``actors.detector.DetectorActor``) behind Serve.

Concurrent requests are gathered by ``serve.batch`` and those sharing queries and operating point
run as one forward pass (``DetectorActor.detect_batch``; each image's boxes equal a lone call).
In ``none`` mode the replica loads nothing and the graph endpoint answers 422, so a deployment
that only serves client-given regions costs no detector memory. Queue depth, batch sizes,
forward time and boxes per image are recorded as Serve metrics (``serve_apps.metrics``).
"""

from __future__ import annotations

import asyncio
from typing import Any, Sequence

import numpy as np
from ray import serve

from actors.detector import DetectorActor, DetectorConfig
from serve_apps.config import DetectorSettings
from serve_apps.metrics import replica_metrics

__all__ = ["DetectorDeployment"]


@serve.deployment(name="Detector")
class DetectorDeployment:
    def __init__(self, settings: DetectorSettings | DetectorConfig | dict[str, Any]) -> None:
        # a bare DetectorConfig (the model alone) batches with DetectorSettings' defaults
        if isinstance(settings, DetectorConfig):
            settings = DetectorSettings(detector=settings)
        self.settings = DetectorSettings.model_validate(settings) if isinstance(settings, dict) else settings
        self.actor = DetectorActor(self.settings.detector)
        self._batched.set_max_batch_size(self.settings.max_batch_size)
        self._batched.set_batch_wait_timeout_s(self.settings.batch_wait_timeout_s)
        self.metrics = replica_metrics()

    def info(self) -> dict:
        return {"enabled": self.actor.enabled, "model": self.actor.cfg.model, "family": self.actor.family}

    def check_health(self) -> None:
        if self.actor.cfg.mode != "none" and self.actor.model is None:
            raise RuntimeError("detector weights not loaded")

    async def detect(self, image: np.ndarray, queries: Sequence[str] | None = None, threshold: float | None = None,
                     max_boxes: int | None = None) -> list[dict]:
        if not self.actor.enabled:  # refused before queueing: no batch slot for a request that cannot run
            return self.actor.detect(image, queries, threshold, max_boxes)
        req = {"image": image, "queries": None if queries is None else tuple(queries), "threshold": threshold,
               "max_boxes": max_boxes}
        with self.metrics.queued():
            out = await self._batched(req)
        if isinstance(out, Exception):
            raise out
        return out

    @serve.batch(max_batch_size=4, batch_wait_timeout_s=0.01)
    async def _batched(self, reqs: list[dict]) -> list[list[dict] | Exception]:
        self.metrics.batch(len(reqs))
        # the forward pass is blocking; a worker thread keeps health checks answered meanwhile
        return await asyncio.to_thread(self._detect_many, reqs)

    def _detect_many(self, reqs: list[dict]) -> list[list[dict] | Exception]:
        out: list[list[dict] | Exception] = [[] for _ in reqs]
        groups: dict[tuple, list[int]] = {}
        for i, r in enumerate(reqs):  # one forward per (queries, threshold, cap)
            groups.setdefault((r["queries"], r["threshold"], r["max_boxes"]), []).append(i)
        for (queries, threshold, max_boxes), idx in groups.items():
            try:
                with self.metrics.forward():
                    boxes = self.actor.detect_batch([reqs[i]["image"] for i in idx], queries, threshold, max_boxes)
            except ValueError as exc:  # bad input fails its own group only; the caller sees the ValueError
                boxes = [exc] * len(idx)
            for i, b in zip(idx, boxes):
                if not isinstance(b, Exception):
                    self.metrics.detections(len(b))
                out[i] = b
        return out
