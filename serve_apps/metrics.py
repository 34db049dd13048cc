"""The Serve app's custom metrics: one home for every name, tag key and bucket boundary.

Instruments are ``ray.serve.metrics`` objects, so Serve adds the ``deployment``, ``replica`` and
``application`` tags itself and Ray's metrics agent exports them on each node's Prometheus
endpoint (``ray_`` prepended; counters gain ``_total``, histograms ``_bucket``/``_sum``/``_count``).
They are created on first use inside the replica process (Serve reads the replica context at
construction), never at import. Ray exports a histogram's ``_sum`` from bucket midpoints, so it
is approximate: exact totals are counters (``relate_predicate_scores``, ``relate_detections``)
and ``cluster/grafana/relate_serve.json`` reads histograms through their buckets and ``_count``
only; its unit test checks every expression against :data:`SPECS`.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from typing import Any, Iterator, Literal

__all__ = ["MetricSpec", "SPECS", "RequestMetricsMiddleware", "ReplicaMetrics", "replica_metrics", "route_template",
           "REQUESTS", "REQUEST_LATENCY", "IN_FLIGHT", "QUEUE_DEPTH", "BATCH_SIZE", "FORWARD_LATENCY",
           "VOCABULARY_CACHE", "PREDICATE_SCORES", "DETECTIONS", "DETECTIONS_PER_IMAGE"]

_LATENCY_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
_BATCH = (1, 2, 4, 8, 16, 32, 64, 128)
_BOXES = (0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)  # <= 0.5: no box (Ray wants boundaries > 0)


@dataclass(frozen=True)
class MetricSpec:
    """One instrument: Prometheus-facing name (without Ray's ``ray_``), kind, tags and buckets."""

    name: str
    kind: Literal["counter", "gauge", "histogram"]
    description: str
    tag_keys: tuple[str, ...] = ()
    boundaries: tuple[float, ...] = ()

    def exported(self) -> tuple[str, ...]:
        """The series names Prometheus scrapes for this instrument."""
        base = f"ray_{self.name}"
        return {"counter": (f"{base}_total",), "gauge": (base,),
                "histogram": (f"{base}_bucket", f"{base}_sum", f"{base}_count")}[self.kind]


# ingress (RequestMetricsMiddleware); `route` is the path template, so label values stay bounded
REQUESTS = MetricSpec("relate_requests", "counter", "HTTP requests answered by the ingress",
                      ("route", "method", "status"))
REQUEST_LATENCY = MetricSpec("relate_request_latency_seconds", "histogram",
                             "ingress time from request start to the last response byte", ("route",), _LATENCY_S)
IN_FLIGHT = MetricSpec("relate_requests_in_flight", "gauge", "HTTP requests currently inside this ingress replica")
# model replicas (relation and detector; Serve's `deployment` tag tells them apart)
QUEUE_DEPTH = MetricSpec("relate_replica_queue_depth", "gauge",
                         "requests inside this model replica: waiting for a batch or in its forward pass")
BATCH_SIZE = MetricSpec("relate_batch_size", "histogram", "requests gathered into one serve.batch call", (), _BATCH)
FORWARD_LATENCY = MetricSpec("relate_forward_latency_seconds", "histogram",
                             "one model forward pass over a group of requests", (), _LATENCY_S)
VOCABULARY_CACHE = MetricSpec("relate_vocabulary_cache_lookups", "counter",
                              "vocabulary lookups by result: 'hit' (already embedded) or 'miss' (embedded now)",
                              ("result",))
PREDICATE_SCORES = MetricSpec("relate_predicate_scores", "counter",
                              "(region pair, predicate) scores computed: pairs scored x vocabulary strings")
DETECTIONS = MetricSpec("relate_detections", "counter", "boxes the detector returned (after threshold and cap)")
DETECTIONS_PER_IMAGE = MetricSpec("relate_detections_per_image", "histogram",
                                  "boxes the detector returned for one image (after threshold and cap)", (), _BOXES)

SPECS: tuple[MetricSpec, ...] = (REQUESTS, REQUEST_LATENCY, IN_FLIGHT, QUEUE_DEPTH, BATCH_SIZE, FORWARD_LATENCY,
                                 VOCABULARY_CACHE, PREDICATE_SCORES, DETECTIONS, DETECTIONS_PER_IMAGE)
_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})


@cache
def _instrument(spec: MetricSpec) -> Any:
    """The process's one instrument for ``spec`` (created lazily: Serve tags it with the replica)."""
    from ray.serve import metrics

    cls = {"counter": metrics.Counter, "gauge": metrics.Gauge, "histogram": metrics.Histogram}[spec.kind]
    kwargs: dict[str, Any] = {"description": spec.description, "tag_keys": spec.tag_keys or None}
    if spec.kind == "histogram":
        kwargs["boundaries"] = list(spec.boundaries)
    return cls(spec.name, **kwargs)


def route_template(scope: dict) -> str:
    """The path template of the route that answered ``scope`` (e.g. '/v1/relations'), 'other' when none did.

    FastAPI records the route it dispatched to in ``scope["route"]`` (also for a 405 and for
    routes Serve's ingress nests in an included router); plain Starlette routes such as /docs
    are matched here with Starlette's own matching. A request refused before routing (a 413
    from the body limit) or a path no route knows counts as 'other'."""
    from starlette.routing import Match

    route = scope.get("route")
    if isinstance(getattr(route, "path", None), str):
        return route.path
    app = scope.get("app")
    for candidate in getattr(getattr(app, "router", None), "routes", ()):
        path = getattr(candidate, "path", None)
        if isinstance(path, str) and candidate.matches(scope)[0] != Match.NONE:
            return path
    return "other"


class RequestMetricsMiddleware:
    """Pure ASGI middleware for the ingress: request count by route template, method and status,
    latency by route, and the number of requests in flight in this replica."""

    def __init__(self, app) -> None:
        self.app = app
        self._in_flight = 0

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        method = scope.get("method", "GET") if scope.get("method") in _METHODS else "OTHER"
        status = 500  # what the client sees when the app raises before answering

        async def recording_send(message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        self._in_flight += 1
        _instrument(IN_FLIGHT).set(self._in_flight)
        start = time.perf_counter()
        try:
            await self.app(scope, receive, recording_send)
        finally:
            self._in_flight -= 1
            _instrument(IN_FLIGHT).set(self._in_flight)
            route = route_template(scope)  # after the call: routing has recorded the route in scope
            _instrument(REQUESTS).inc(1, tags={"route": route, "method": method, "status": str(status)})
            _instrument(REQUEST_LATENCY).observe(time.perf_counter() - start, tags={"route": route})


class ReplicaMetrics:
    """A model replica's instruments: queue depth, batch sizes, forward time and what was computed."""

    def __init__(self) -> None:
        self._queued = 0
        for spec in SPECS:  # created in the replica's constructor, where Serve's context is set
            if spec not in (REQUESTS, REQUEST_LATENCY, IN_FLIGHT):
                _instrument(spec)
        _instrument(QUEUE_DEPTH).set(0)

    @contextmanager
    def queued(self) -> Iterator[None]:
        """Count a request as inside this replica until its batch has answered it."""
        self._queued += 1
        _instrument(QUEUE_DEPTH).set(self._queued)
        try:
            yield
        finally:
            self._queued -= 1
            _instrument(QUEUE_DEPTH).set(self._queued)

    @contextmanager
    def forward(self) -> Iterator[None]:
        """Time one model forward pass."""
        start = time.perf_counter()
        try:
            yield
        finally:
            _instrument(FORWARD_LATENCY).observe(time.perf_counter() - start)

    def batch(self, size: int) -> None:
        _instrument(BATCH_SIZE).observe(size)

    def vocabulary_lookup(self, hit: bool) -> None:
        _instrument(VOCABULARY_CACHE).inc(1, tags={"result": "hit" if hit else "miss"})

    def predicate_scores(self, pairs: int, strings: int) -> None:
        if pairs and strings:
            _instrument(PREDICATE_SCORES).inc(pairs * strings)

    def detections(self, boxes: int) -> None:
        """One image's boxes: the exact total and the per-image distribution."""
        if boxes:
            _instrument(DETECTIONS).inc(boxes)
        _instrument(DETECTIONS_PER_IMAGE).observe(boxes)


@cache
def replica_metrics() -> ReplicaMetrics:
    """This process's :class:`ReplicaMetrics` (one replica per Serve actor process)."""
    return ReplicaMetrics()
