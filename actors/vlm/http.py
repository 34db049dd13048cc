"""OpenAI-compatible chat-completions client (``vllm serve``, a ``ray.serve.llm`` app, any gateway).

Requests run in a bounded thread pool (``max_concurrency`` in flight per actor), each with a
timeout; timeouts, connection errors, 429 and 5xx are retried with exponential backoff and
jitter. A request that still fails yields an empty answer, which the parser counts as unusable
(the batch goes on). Other 4xx answers are configuration errors (bad model name, bad key) and
raise at once with the server's message, because retrying cannot fix them.
"""

from __future__ import annotations

import base64
import logging
import random
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

import httpx

from actors.vlm.base import VLM_BACKENDS, VLMRequest
from actors.vlm.configs import OpenAIConfig

__all__ = ["OpenAIBackend", "chat_messages", "HTTPBackendError"]

log = logging.getLogger(__name__)
_RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


class HTTPBackendError(RuntimeError):
    """The server refused a request in a way retrying cannot fix (4xx other than 408/429)."""


def chat_messages(req: VLMRequest) -> list[dict]:
    """One user turn: the marked image as a PNG data URL, then the prompt."""
    url = "data:image/png;base64," + base64.b64encode(req.image_png).decode("ascii")
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                         {"type": "text", "text": req.prompt}]}]


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

    def _one(self, req: VLMRequest) -> str:
        delay = self.cfg.backoff_s
        for attempt in range(self.cfg.max_retries + 1):
            try:
                resp = self._client.post("/chat/completions", json=self._payload(req))
                if resp.status_code == 200:
                    return str(resp.json()["choices"][0]["message"]["content"] or "")
                if resp.status_code not in _RETRY_STATUS:
                    raise HTTPBackendError(f"{self.cfg.base_url}: HTTP {resp.status_code} for image "
                                           f"{req.image_id!r}: {resp.text[:300]}")
                why = f"HTTP {resp.status_code}"
            except (httpx.TimeoutException, httpx.TransportError) as exc:
                why = type(exc).__name__
            except (KeyError, IndexError, TypeError, ValueError) as exc:
                why = f"malformed response ({exc!r})"
            if attempt < self.cfg.max_retries:
                self.retries += 1
                time.sleep(delay * (1.0 + 0.25 * random.random()))
                delay *= 2
        self.failures += 1
        log.warning("giving up on image %s (%s) after %d attempts", req.image_id, why, self.cfg.max_retries + 1)
        return ""

    def generate(self, requests: Sequence[VLMRequest]) -> list[str]:
        return list(self._pool.map(self._one, requests))

    def close(self) -> None:
        self._pool.shutdown(wait=False)
        self._client.close()

    def __del__(self) -> None:  # actors die without close(); do not leak sockets
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass


VLM_BACKENDS.register("openai")(OpenAIBackend)
