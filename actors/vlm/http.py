"""OpenAI-compatible chat-completions client (``vllm serve``, a ``ray.serve.llm`` app, any gateway).

Requests run in a bounded thread pool (``max_concurrency`` in flight per actor), each with a
timeout; timeouts, connection errors, malformed response bodies, 408/429 and 5xx are retried
with capped exponential backoff and jitter, at most ``max_retries`` times. ``generate_outcomes``
reports how each call ended (:class:`VLMOutcome`: the answer, or the failure kind, message and
attempt count) so the annotation pipeline records failures as data; ``generate`` (the judge's
interface) maps a failure to an empty answer. Other 4xx answers fail the call at once (retrying
cannot fix them), except 401/403/404, which mean a wrong key, model or URL: no call can succeed,
so they raise with the server's message.
"""

from __future__ import annotations

import base64
import logging
import random
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

import httpx

from actors.vlm.base import VLM_BACKENDS, VLMOutcome, VLMRequest
from actors.vlm.configs import OpenAIConfig

__all__ = ["OpenAIBackend", "chat_messages", "HTTPBackendError"]

log = logging.getLogger(__name__)
_RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}
_RETRY_KINDS = {"timeout", "connection", "malformed_response"}
_CONFIG_STATUS = {401, 403, 404}  # wrong key, model or URL: every call would fail the same way


class HTTPBackendError(RuntimeError):
    """The server refused a request in a way no call can get past (401, 403, 404): a configuration error."""


def chat_messages(req: VLMRequest) -> list[dict]:
    """One user turn: the marked image as a PNG data URL, then the prompt."""
    url = "data:image/png;base64," + base64.b64encode(req.image_png).decode("ascii")
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                         {"type": "text", "text": req.prompt}]}]


def _count(usage: dict, key: str) -> int | None:
    """A token count from ``usage``, None when the server did not send it (never a guess)."""
    v = usage.get(key) if isinstance(usage, dict) else None
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 else None


class OpenAIBackend:
    """Batch of requests -> answers, via ``POST {base_url}/chat/completions``."""

    def __init__(self, cfg: OpenAIConfig) -> None:
        self.cfg = cfg
        key = cfg.bearer()
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        limits = httpx.Limits(max_connections=cfg.max_concurrency, max_keepalive_connections=cfg.max_concurrency)
        self._client = httpx.Client(base_url=cfg.base_url.rstrip("/"), headers=headers,
                                    timeout=httpx.Timeout(cfg.timeout_s), limits=limits)
        self._pool = ThreadPoolExecutor(max_workers=cfg.max_concurrency, thread_name_prefix="vlm-http")
        self.failures = 0
        self.retries = 0

    def _payload(self, req: VLMRequest) -> dict:
        s = self.cfg.sampling
        return {"model": self.cfg.model, "messages": chat_messages(req), "temperature": s.temperature,
                "top_p": s.top_p, "max_tokens": s.max_tokens}

    def _attempt(self, req: VLMRequest) -> tuple[str | None, str, str, dict]:
        """One POST: ``(answer, "", "", usage)`` or ``(None, kind, message, {})``; raises on
        configuration errors. ``usage`` is the response's OpenAI ``usage`` object ({} without one)."""
        try:
            resp = self._client.post("/chat/completions", json=self._payload(req))
        except httpx.TimeoutException as exc:
            return None, "timeout", f"{type(exc).__name__} after {self.cfg.timeout_s:g} s", {}
        except httpx.TransportError as exc:
            return None, "connection", f"{type(exc).__name__}: {exc}"[:300], {}
        if resp.status_code == 200:
            try:
                body = resp.json()
                return str(body["choices"][0]["message"]["content"] or ""), "", "", body.get("usage") or {}
            except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
                return None, "malformed_response", f"{exc!r}; body starts {resp.text[:120]!r}", {}
        if resp.status_code in _CONFIG_STATUS:
            raise HTTPBackendError(f"{self.cfg.base_url}: HTTP {resp.status_code} for image {req.image_id!r} "
                                   f"(check base_url, model and api key): {resp.text[:300]}")
        return None, f"http_{resp.status_code}", resp.text[:300], {}

    def outcome(self, req: VLMRequest) -> VLMOutcome:
        """One call with its retries: the answer with the token counts the server reported, or the
        last failure and how many attempts it took; either way the call's wall time."""
        delay = self.cfg.backoff_s
        t0 = time.perf_counter()
        for attempt in range(1, self.cfg.max_retries + 2):
            text, kind, msg, usage = self._attempt(req)
            if text is not None:
                return VLMOutcome(text, attempt, prompt_tokens=_count(usage, "prompt_tokens"),
                                  completion_tokens=_count(usage, "completion_tokens"),
                                  latency_s=time.perf_counter() - t0)
            retryable = kind in _RETRY_KINDS or kind in {f"http_{c}" for c in _RETRY_STATUS}
            if not retryable or attempt > self.cfg.max_retries:
                break
            self.retries += 1
            time.sleep(min(delay, self.cfg.max_backoff_s) * (1.0 + 0.25 * random.random()))
            delay *= 2
        self.failures += 1
        log.warning("giving up on image %s (%s: %s) after %d attempt(s)", req.image_id, kind, msg, attempt)
        return VLMOutcome(None, attempt, kind, msg, latency_s=time.perf_counter() - t0)

    def generate_outcomes(self, requests: Sequence[VLMRequest]) -> list[VLMOutcome]:
        return list(self._pool.map(self.outcome, requests))

    def generate(self, requests: Sequence[VLMRequest]) -> list[str]:
        """Answers only; a failed call reads as an empty answer (callers that count failures use
        :meth:`generate_outcomes`)."""
        return [o.text if o.ok else "" for o in self.generate_outcomes(requests)]

    def close(self) -> None:
        self._pool.shutdown(wait=False)
        self._client.close()

    def __del__(self) -> None:  # actors die without close(); do not leak sockets
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass


VLM_BACKENDS.register("openai")(OpenAIBackend)
