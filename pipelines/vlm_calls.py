"""Calling a VLM from a pipeline: how each call ended, the breaker that stops calling a VLM that
is down, and the per-call usage counters (tokens, latency histogram, generate time).

Shared by the annotation passes (``pipelines.annotate_stages``) and the judge job
(``eval_jobs.judge_shard``).
"""

from __future__ import annotations

import math
from typing import Sequence

from actors.vlm.base import (BUSY_COLUMN, COMPLETION_TOKENS_COLUMN, LATENCY_COLUMN, PROMPT_TOKENS_COLUMN, VLMOutcome,
                             VLMRequest)

__all__ = ["UNAVAILABLE", "CONFIG_ERROR", "STOP_KINDS", "call_outcomes", "CallBreaker", "latency_bin", "call_usage",
           "LATENCY_BINS_PER_DOUBLING"]

UNAVAILABLE = "vlm_unavailable"  # a call not made: the breaker had tripped (the VLM is down)
CONFIG_ERROR = "config_error"  # 401/403/404: wrong key, model or URL; no call can succeed
STOP_KINDS = (UNAVAILABLE, CONFIG_ERROR)  # failures that mean the run cannot succeed as configured


def call_outcomes(backend, reqs: Sequence[VLMRequest]) -> list[VLMOutcome]:
    """How each call ended, for any backend with ``generate``: per-call retries and failures where the
    backend reports them (HTTP: ``generate_outcomes``; a 401/403/404 is a CONFIG_ERROR failure of
    every call), else its answers, or a ``backend_error`` failure of every call when it raised.
    Shared by the annotation passes and the judge job."""
    if hasattr(backend, "generate_outcomes"):  # per-call retries and failures (HTTP)
        from actors.vlm.http import HTTPBackendError

        try:
            return backend.generate_outcomes(reqs)
        except HTTPBackendError as exc:
            return [VLMOutcome(None, 1, CONFIG_ERROR, str(exc)[:500]) for _ in reqs]
    try:
        return [VLMOutcome(t) for t in backend.generate(reqs)]
    except Exception as exc:  # noqa: BLE001 - an engine error fails these calls, recorded, not the run
        return [VLMOutcome(None, 1, "backend_error", f"{type(exc).__name__}: {exc}"[:500]) for _ in reqs]


class CallBreaker:
    """Counts failed calls in a row. Past ``limit`` (or at once on a configuration error) it trips:
    the VLM is down or misconfigured, so later calls are not made but recorded as UNAVAILABLE.
    Tripping instead of raising lets every finished image still reach the driver and the disk
    (Ray Data drops a failed job's in-flight batches); the driver then stops the run."""

    def __init__(self, limit: int | None) -> None:
        self.limit, self.run, self.tripped = limit, 0, None

    def record(self, failed: bool, kind: str = "", message: str = "") -> None:
        self.run = self.run + 1 if failed else 0
        if self.tripped is None and failed and (kind == CONFIG_ERROR or (self.limit is not None and self.run >= self.limit)):
            self.tripped = (f"{self.run} VLM calls failed in a row (last: {kind}: {message[:200]}); "
                            f"the server or engine looks down or misconfigured")


LATENCY_BINS_PER_DOUBLING = 16  # histogram resolution: bin edges 2**(k/16) ms apart, about 4.4%


def latency_bin(seconds: float) -> str:
    """The histogram bin of a call's latency: k with 2**(k/16) <= ms < 2**((k+1)/16)."""
    ms = max(seconds * 1000.0, 1e-3)
    return str(math.floor(math.log2(ms) * LATENCY_BINS_PER_DOUBLING))


def call_usage(pass_name: str, call: dict, answered: bool) -> dict:
    """Counters of one call made in ``pass_name``: tokens the backend reported for an answer (or a
    count of answers it reported none for), the latency histogram, the generate time spent."""
    u: dict = {}
    if answered:
        p, c = call.get(PROMPT_TOKENS_COLUMN), call.get(COMPLETION_TOKENS_COLUMN)
        if p is None and c is None:
            u["tokens_not_reported"] = {pass_name: 1}
        else:  # a server that reports one count and not the other: the missing one is counted apart
            u["tokens_reported"] = {pass_name: 1}
            for name, v in (("prompt_tokens", p), ("completion_tokens", c)):
                if v is None:
                    u.setdefault(f"{name}_not_reported", {})[pass_name] = 1
                else:
                    u[name] = {pass_name: int(v)}
    if call.get(LATENCY_COLUMN) is not None:
        u["latency_hist"] = {pass_name: {latency_bin(float(call[LATENCY_COLUMN])): 1}}
    if call.get(BUSY_COLUMN) is not None:
        u["busy_s"] = {pass_name: float(call[BUSY_COLUMN])}
    return u
