"""RelationModel deployment: a checkpoint and its text bank behind ``serve.batch``.

Concurrent requests are gathered into one forward pass (``serve.batch``); within a batch they
are grouped by vocabulary, because the model scores every pair against one bank matrix at a
time. A per-request vocabulary is embedded once with the checkpoint's own text encoder and kept
in a small LRU keyed by the sha256 of its strings, so repeated vocabularies cost nothing and a
stream of distinct ones cannot grow memory without bound. A new vocabulary is embedded before its
request joins the batch, in a thread of its own, at most ``max_pending_embeddings`` at once (503 +
Retry-After beyond): the shared batch never waits for someone else's embedding. Scores come from the same
``RelationPredictor`` the Python API and the evaluator use, so they match ``predict`` exactly.
Queue depth, batch sizes, forward time, vocabulary cache hits and predicate scores are recorded
as Serve metrics (``serve_apps.metrics``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import OrderedDict
from typing import Any

import numpy as np
from ray import serve

from relate.rle import decode_rle
from relate.text.vocabulary import vocabulary_key
from serve_apps.allocator import bound_malloc_retention
from serve_apps.config import RelationSettings
from serve_apps.metrics import replica_metrics

__all__ = ["RelationModelDeployment", "load_predictor", "vocabulary_key", "BankCache"]

_LOG = logging.getLogger("ray.serve")


def load_predictor(settings: RelationSettings):
    """A ``RelationPredictor`` from the checkpoint folder, or seeded random weights for smoke runs."""
    from relate.api import RelationPredictor, load_model

    if settings.checkpoint is not None:
        return load_model(settings.checkpoint, device=settings.device, batch_size=settings.max_batch_size,
                          runtime=settings.runtime, onnx_path=settings.onnx_path,
                          ir_path=settings.ir_path)
    import torch

    from relate.data.lexicon import all_surface_forms
    from relate.model.model import create_relation_model
    from relate.text.bank import build_bank

    rnd = settings.random
    torch.manual_seed(rnd.seed)  # identical weights in every replica
    model = create_relation_model(rnd.model)
    bank = build_bank(rnd.vocabulary or all_surface_forms(), encoder_name=rnd.text_encoder)
    return RelationPredictor(model, bank, device=settings.device, batch_size=settings.max_batch_size)


class BankCache:
    """Embedded vocabularies by content hash, least recently used evicted beyond ``size``.

    It owns the predictor's bank table for request vocabularies: the predictor keeps every bank
    it ever saw, so evicted ones are removed there too (the default bank is never evicted).
    """

    def __init__(self, predictor, size: int) -> None:
        self.predictor, self.size = predictor, size
        self._lru: OrderedDict[str, tuple[str, ...]] = OrderedDict()
        self.pinned = {tuple(predictor.vocabulary)}
        self._lock = threading.Lock()  # the embedding thread and the batch thread both call ensure

    def ensure(self, strings: tuple[str, ...], pin: bool = False) -> str:
        self.predictor.add_vocabulary(strings)  # the slow part (embedding) runs outside the lock
        with self._lock:
            return self._track(strings, pin)

    def _track(self, strings: tuple[str, ...], pin: bool) -> str:
        key = vocabulary_key(strings)
        if pin or strings in self.pinned:
            self.pinned.add(strings)
            return key
        if key in self._lru:
            self._lru.move_to_end(key)
            return key
        self._lru[key] = strings
        while len(self._lru) > self.size:
            _, old = self._lru.popitem(last=False)
            if old not in self.pinned:
                self.predictor.drop_vocabulary(old)
        return key


def _expand_regions(regions) -> np.ndarray:
    """Boxes as given; masks arrive as checked run lengths (the ingress bounded their dense size)
    and are expanded here, where the model needs pixels."""
    if isinstance(regions, dict) and "rle_counts" in regions:
        h, w = regions["height"], regions["width"]
        return np.stack([decode_rle(c, h, w) for c in regions["rle_counts"]])
    return np.array(regions)


@serve.deployment(name="RelationModel")
class RelationModelDeployment:
    """``relations(request)`` -> triplets, layout and content graphs for one image."""

    def __init__(self, settings: RelationSettings | dict[str, Any]) -> None:
        bound_malloc_retention()  # images and masks leave with their batch (serve_apps/allocator.py)
        settings = RelationSettings.model_validate(settings) if isinstance(settings, dict) else settings
        self.settings = settings.resolved()  # build_app resolved 'latest' already; a bare deployment may not have
        _LOG.info("relation model serves %s", self.settings.weights_label())
        if self.settings.torch_threads:
            import torch

            torch.set_num_threads(self.settings.torch_threads)
        self.predictor = load_predictor(self.settings)
        self.cache = BankCache(self.predictor, self.settings.bank_cache_size)
        self.named = {"default": tuple(self.predictor.vocabulary)}
        self.named.update({k: tuple(s.strip() for s in v) for k, v in self.settings.banks.items()})
        self._batched.set_max_batch_size(self.settings.max_batch_size)
        self._batched.set_batch_wait_timeout_s(self.settings.batch_wait_timeout_s)
        self.metrics = replica_metrics()
        self._embedding: dict[tuple[str, ...], asyncio.Future] = {}

    def info(self) -> dict:
        return {"banks": sorted(self.named), "default_size": len(self.named["default"]),
                "calibrated": bool(self.predictor.calibration.fitted)}

    def check_health(self) -> None:
        if self.predictor is None or not self.named["default"]:
            raise RuntimeError("relation model not loaded")

    def _strings(self, req: dict) -> tuple[tuple[str, ...], str]:
        if req.get("vocabulary") is not None:
            strings = tuple(req["vocabulary"])
            return strings, "request:" + vocabulary_key(strings)[:12]
        name = req.get("bank") or "default"
        if name not in self.named:
            raise ValueError(f"unknown bank {name!r}; configured banks: {sorted(self.named)}")
        return self.named[name], name

    async def relations(self, req: dict) -> dict:
        """One image: ``image`` (H, W, 3) uint8, ``regions`` (boxes (N, 4) or masks (N, H, W)),
        ``vocabulary`` or ``bank``, ``topk``, ``threshold``. Errors come back as {"error": msg}."""
        if req.get("vocabulary") is not None:
            busy = await self._embed(tuple(req["vocabulary"]))
            if busy is not None:
                return busy
        # the image stays the read-only object-store array (no copy of a large picture here):
        # relate.api.prepare_image copies one channel at a time
        req = {**req, "regions": _expand_regions(req["regions"])}
        with self.metrics.queued():
            return await self._batched(req)

    async def _embed(self, strings: tuple[str, ...]) -> dict | None:
        """Embed a new request vocabulary outside the batch; None when it is ready, else the busy
        answer. Requests with the same new vocabulary share one embedding."""
        strings = tuple(s.strip() for s in strings)
        ready = self.predictor.has_vocabulary(strings)
        self.metrics.vocabulary_lookup(hit=ready)
        if ready:
            return None
        pending = self._embedding.get(strings)
        if pending is None:
            if len(self._embedding) >= self.settings.max_pending_embeddings:
                return {"error": f"{len(self._embedding)} new vocabularies are being embedded on this replica "
                                 f"(the most at once); retry later, or reuse a vocabulary already sent",
                        "code": "vocabulary_busy", "retry_after_s": 1}
            pending = asyncio.ensure_future(asyncio.to_thread(self._embed_now, strings))
            self._embedding[strings] = pending
            pending.add_done_callback(lambda _: self._embedding.pop(strings, None))
        try:
            await asyncio.shield(pending)
        except ValueError as exc:
            return {"error": str(exc)}
        return None

    def _embed_now(self, strings: tuple[str, ...]) -> None:
        self._set_threads()
        self.cache.ensure(strings)

    def _set_threads(self) -> None:
        if self.settings.torch_threads:  # OpenMP's thread count is per OS thread: apply it in each worker thread
            import torch

            torch.set_num_threads(self.settings.torch_threads)

    @serve.batch(max_batch_size=8, batch_wait_timeout_s=0.01)
    async def _batched(self, reqs: list[dict]) -> list[dict]:
        self.metrics.batch(len(reqs))
        return await asyncio.to_thread(self._score_many, reqs)

    def _score_many(self, reqs: list[dict]) -> list[dict]:
        self._set_threads()
        out: list[dict | None] = [None] * len(reqs)
        groups: dict[tuple[str, ...], list[int]] = {}
        for i, r in enumerate(reqs):
            try:
                strings, label = self._strings(r)
                if r.get("threshold") is not None and not self.predictor.calibration.fitted:
                    raise ValueError("threshold needs a calibrated checkpoint (its Platt a, b are not fitted); use topk")
                if label in self.named:  # request vocabularies were looked up (and embedded) in _embed
                    self.metrics.vocabulary_lookup(hit=self.predictor.has_vocabulary(strings))
                self.cache.ensure(strings, pin=label in self.named)
                r["_label"] = label
                groups.setdefault(strings, []).append(i)
            except ValueError as exc:
                out[i] = {"error": str(exc)}
        for strings, idx in groups.items():
            try:  # one forward for the group
                with self.metrics.forward():
                    scores = self.predictor.score_images([reqs[i]["image"] for i in idx],
                                                         [reqs[i]["regions"] for i in idx], strings)
            except ValueError:  # one bad request must not fail its neighbours: retry one by one
                scores = [self._score_one(reqs[i], strings) for i in idx]
            for i, s in zip(idx, scores):
                if not isinstance(s, dict):
                    self.metrics.predicate_scores(pairs=s.pairs.shape[0], strings=len(strings))
                out[i] = s if isinstance(s, dict) else self._graph(s, strings, reqs[i])
        return out

    def _score_one(self, req: dict, strings: tuple[str, ...]):
        try:
            return self.predictor.score_images([req["image"]], [req["regions"]], strings)[0]
        except ValueError as exc:
            return {"error": str(exc)}

    def _graph(self, s, strings: tuple[str, ...], req: dict) -> dict:
        topk = int(req.get("topk") or self.settings.default_topk)
        # the API's one home of the response body (relate predict writes the same)
        return self.predictor.graph(s, strings, topk, req.get("threshold"), req["_label"])
