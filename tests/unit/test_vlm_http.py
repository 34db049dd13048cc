"""The OpenAI-compatible client against a real local FastAPI/uvicorn server on 127.0.0.1."""

from __future__ import annotations

import base64
import socket
import threading
import time

import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from actors.vlm import OpenAIBackend, OpenAIConfig, VLMConfig, VLMRequest, create_backend
from actors.vlm.http import HTTPBackendError


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.in_flight = 0
        self.peak = 0
        self.calls: dict[str, int] = {}
        self.auth: list[str | None] = []


def _app(state: _State) -> FastAPI:
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await request.json()
        state.auth.append(request.headers.get("authorization"))
        if body["model"] == "missing":
            return JSONResponse({"error": "model not found"}, status_code=404)
        content = body["messages"][0]["content"]
        url, text = content[0]["image_url"]["url"], content[1]["text"]
        assert url.startswith("data:image/png;base64,") and base64.b64decode(url.split(",", 1)[1])
        with state.lock:
            state.calls[text] = state.calls.get(text, 0) + 1
            n = state.calls[text]
            state.in_flight += 1
            state.peak = max(state.peak, state.in_flight)
        try:
            import asyncio
            if text.startswith("flaky") and n <= 2:
                return JSONResponse({"error": "busy"}, status_code=503)
            if text.startswith("slow"):
                await asyncio.sleep(2.0)
            await asyncio.sleep(0.05)
            return {"choices": [{"message": {"role": "assistant", "content": f"echo:{text}"}}]}
        finally:
            with state.lock:
                state.in_flight -= 1

    return app


@pytest.fixture(scope="module")
def server():
    state = _State()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = uvicorn.Server(uvicorn.Config(_app(state), host="127.0.0.1", port=port, log_level="error"))
    th = threading.Thread(target=srv.run, daemon=True)
    th.start()
    for _ in range(200):
        if srv.started:
            break
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}/v1", state
    srv.should_exit = True
    th.join(timeout=5)


def _req(text: str) -> VLMRequest:
    return VLMRequest(image_png=b"\x89PNG fake", prompt=text, image_id=text, pass_name="semantic")


def test_answers_in_order_with_bounded_concurrency(server):
    url, state = server
    backend = OpenAIBackend(OpenAIConfig(base_url=url, max_concurrency=3, api_key="tok"))
    state.peak = 0
    out = backend.generate([_req(f"q{i}") for i in range(12)])
    assert out == [f"echo:q{i}" for i in range(12)]
    assert 2 <= state.peak <= 3
    assert state.auth[-1] == "Bearer tok"


def test_bearer_from_environment(server, monkeypatch):
    url, state = server
    monkeypatch.setenv("RELATE_TEST_JUDGE_KEY", "from-env-0123456789")
    backend = OpenAIBackend(OpenAIConfig(base_url=url, api_key_env="RELATE_TEST_JUDGE_KEY"))
    assert backend.generate([_req("k")]) == ["echo:k"] and state.auth[-1] == "Bearer from-env-0123456789"
    with pytest.raises(ValueError, match="RELATE_TEST_UNSET"):
        OpenAIBackend(OpenAIConfig(base_url=url, api_key_env="RELATE_TEST_UNSET"))
    with pytest.raises(ValueError, match="not both"):
        OpenAIConfig(api_key="a", api_key_env="B")


def test_transient_errors_are_retried_with_backoff(server):
    url, state = server
    backend = OpenAIBackend(OpenAIConfig(base_url=url, max_retries=3, backoff_s=0.05))
    t0 = time.perf_counter()
    assert backend.generate([_req("flaky-1")]) == ["echo:flaky-1"]
    assert state.calls["flaky-1"] == 3 and backend.retries == 2
    assert time.perf_counter() - t0 >= 0.05 + 0.1  # two backoffs, doubling


def test_timeouts_give_an_empty_answer_after_retries(server):
    url, _ = server
    backend = OpenAIBackend(OpenAIConfig(base_url=url, timeout_s=0.3, max_retries=1, backoff_s=0.01))
    assert backend.generate([_req("slow-1"), _req("fast")]) == ["", "echo:fast"]
    assert backend.failures == 1


def test_configuration_errors_raise_with_the_server_message(server):
    url, _ = server
    backend = create_backend(VLMConfig(backend="openai", openai=OpenAIConfig(base_url=url, model="missing")))
    with pytest.raises(HTTPBackendError, match="404.*model not found"):
        backend.generate([_req("x")])


def test_unreachable_server_is_not_fatal():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    backend = OpenAIBackend(OpenAIConfig(base_url=f"http://127.0.0.1:{port}/v1", max_retries=1, backoff_s=0.01, timeout_s=1))
    assert backend.generate([_req("a")]) == [""] and backend.failures == 1
