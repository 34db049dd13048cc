"""A real OpenAI-compatible chat-completions server on 127.0.0.1 that fails on a fixed schedule.

It is the outside engine of the annotation tests (nothing of ours is faked): our HTTP client
talks to it over TCP exactly as to ``vllm serve``. Answers are a pure function of the request
content (image data URL + prompt text), so a clean server and a flaky one produce the same
corpus. Failures follow a deterministic schedule keyed by the content hash and the attempt
number for that content:

* bucket = hash % 10; buckets 0, 1, 2 fail once (HTTP 500, a timeout, a garbage body), so the
  client's retry succeeds within the run;
* buckets 3, 4, 5 fail their first 3, 2, 2 attempts (HTTP 503, a garbage body, a timeout) when
  the content is first seen while ``hard`` is on: a client allowed one retry records the call as
  failed, and a rerun (``hard`` off) retries it and succeeds (bucket 3 after one more failure).
  Content first seen with ``hard`` off fails once at most.

Every answer carries an OpenAI ``usage`` object with token counts derived from the content
(``usage_for``), recorded in ``usage_sent``; ``usage=False`` leaves it out (a server that
reports none). ``answer`` replaces :func:`answer_for` (e.g. the judge job's yes/no verdicts);
``seen`` maps each content key to the request's (prompt, sha1 of the PNG bytes), so a test can
tell which of its calls the server was asked. ``mode="clean"`` answers everything. ``dead_after`` makes every request after that many fail
with 503 (a VLM that goes down). At most ``max_requests`` requests are served; more is a test
bug and answers 500 with ``overflow`` set.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["FlakyVLM", "flaky_vlm"]

_PREDICATES = ("holding", "next to", "left of", "on", "looking at", "touching", "behind", "riding")
_FAIL_ONCE = {0: "http_500", 1: "timeout", 2: "garbage"}
_FAIL_HARD = {3: ("http_503", 3), 4: ("garbage", 2), 5: ("timeout", 2)}


def answer_for(prompt: str, key: str) -> str:
    """A plausible annotator answer: a few relations between the numbered objects of the prompt."""
    ids = [int(m) for m in re.findall(r"^(\d+): ", prompt, flags=re.M)]
    h = int(key, 16)
    rels = []
    for k in range(min(3, max(len(ids) - 1, 0))):
        s, o = ids[(h >> (4 * k)) % len(ids)], ids[(h >> (4 * k + 2)) % len(ids)]
        if s != o:
            rels.append({"subject_id": s, "predicate": _PREDICATES[(h >> (3 * k)) % len(_PREDICATES)], "object_id": o})
    return "```json\n" + json.dumps({"relations": rels}) + "\n```"


def usage_for(prompt: str, key: str) -> dict:
    """Token counts the server reports for an answer: known numbers a test can sum."""
    p = 100 + len(prompt) // 4 + int(key[:2], 16)
    c = 7 + int(key[2:4], 16) % 50
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


@dataclass
class FlakyVLM:
    mode: str = "flaky"
    hard: bool = True
    timeout_sleep_s: float = 1.5
    dead_after: int | None = None
    max_requests: int = 3000
    usage: bool = True
    answer: Callable[[str, str], str] | None = None    # (prompt, key) -> answer text; default answer_for
    seen: dict = field(default_factory=dict)          # key -> (prompt, sha1 of the PNG bytes)
    usage_sent: list = field(default_factory=list)    # (phase, key, prompt_tokens, completion_tokens) per answer
    attempts: dict = field(default_factory=dict)      # key -> attempts so far
    hard_keys: set = field(default_factory=set)       # keys first seen while hard was on
    log: list = field(default_factory=list)           # (phase, key, attempt, outcome)
    phase: int = 1
    overflow: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    url: str = ""

    def decide(self, key: str) -> tuple[int, str]:
        with self.lock:
            n = len(self.log)
            attempt = self.attempts.get(key, 0) + 1
            self.attempts[key] = attempt
            if attempt == 1 and self.hard:
                self.hard_keys.add(key)
            if n >= self.max_requests:
                self.overflow = True
                outcome = "overflow"
            elif self.dead_after is not None and n >= self.dead_after:
                outcome = "http_503"
            elif self.mode == "clean":
                outcome = "ok"
            else:
                bucket = int(key, 16) % 10
                outcome = "ok"
                if bucket in _FAIL_ONCE and attempt == 1:
                    outcome = _FAIL_ONCE[bucket]
                elif bucket in _FAIL_HARD:
                    kind, times = _FAIL_HARD[bucket]
                    if attempt <= (times if key in self.hard_keys else 1):
                        outcome = kind
            self.log.append((self.phase, key, attempt, outcome))
            return attempt, outcome

    def requested(self, phase: int) -> set[str]:
        return {k for p, k, _, _ in self.log if p == phase}

    def failed_at_end_of(self, phase: int) -> set[str]:
        """Keys whose last request in ``phase`` failed (the calls that run recorded as failures)."""
        last = {}
        for p, k, _, outcome in self.log:
            if p == phase:
                last[k] = outcome
        return {k for k, o in last.items() if o != "ok"}


def _handler(state: FlakyVLM):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a) -> None:  # keep test output clean
            pass

        def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
            try:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client timed out and left

        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            if self.path != "/v1/chat/completions":
                return self._send(404, b'{"error": "no such route"}')
            content = body["messages"][-1]["content"]
            url = next(c["image_url"]["url"] for c in content if c["type"] == "image_url")
            prompt = next(c["text"] for c in content if c["type"] == "text")
            key = hashlib.sha256((url + "\n" + prompt).encode()).hexdigest()[:16]
            png = base64.b64decode(url.split(",", 1)[1])
            with state.lock:
                state.seen[key] = (prompt, hashlib.sha1(png).hexdigest())
            _, outcome = state.decide(key)
            if outcome == "timeout":
                time.sleep(state.timeout_sleep_s)
                return self._send(504, b'{"error": "late"}')
            if outcome == "garbage":
                return self._send(200, b"<html>upstream proxy hiccup", "text/html")
            if outcome.startswith("http_") or outcome == "overflow":
                code = int(outcome[5:]) if outcome.startswith("http_") else 500
                return self._send(code, json.dumps({"error": outcome}).encode())
            msg = {"role": "assistant", "content": (state.answer or answer_for)(prompt, key)}
            reply = {"id": key, "object": "chat.completion", "model": body.get("model"),
                     "choices": [{"index": 0, "message": msg, "finish_reason": "stop"}]}
            if state.usage:
                reply["usage"] = usage_for(prompt, key)
                with state.lock:
                    state.usage_sent.append((state.phase, key, reply["usage"]["prompt_tokens"],
                                             reply["usage"]["completion_tokens"]))
            self._send(200, json.dumps(reply).encode())
    return Handler


class flaky_vlm:  # noqa: N801 - used as a context manager, like open()
    """``with flaky_vlm(mode="flaky") as server: ... server.url``; the server stops on exit."""

    def __init__(self, **kw) -> None:
        self.state = FlakyVLM(**kw)

    def __enter__(self) -> FlakyVLM:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self.state))
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.state.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        return self.state

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
