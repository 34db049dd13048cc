"""What answers before the app does (no Ray): the Host check, Serve's plain-text errors rewritten
to the API's JSON at the proxy, and proxy timeouts that leave the app time to answer first
(over HTTP: tests/ray/test_serve_admission_http.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.testclient import TestClient

from serve_apps.auth import HostCheckMiddleware, allowed_host_names, request_host
from serve_apps.config import SecuritySettings, ServeAppConfig
from serve_apps.proxy_errors import ServeErrorJsonMiddleware

CONFIGS = Path(__file__).resolve().parents[2] / "serve_apps" / "configs"


def test_request_host_and_allowed_names():
    assert request_host("127.0.0.1:8000") == "127.0.0.1" and request_host("LocalHost") == "localhost"
    assert request_host("[::1]:8000") == "[::1]" and request_host("[::1]") == "[::1]" and request_host(None) == ""
    assert allowed_host_names("127.0.0.1", ["Relate.Example"]) == ["127.0.0.1", "localhost", "[::1]",
                                                                    "relate.example"]


def test_host_check_is_json_421_and_off_without_a_list():
    async def ok(request):
        return PlainTextResponse("served")

    inner = Starlette(routes=[Route("/{path:path}", ok)])
    client = TestClient(HostCheckMiddleware(inner, allowed=lambda: allowed_host_names("127.0.0.1")))
    assert client.get("/x", headers={"Host": "localhost:8000"}).text == "served"
    r = client.get("/x", headers={"Host": "rebound.example:8000"})
    assert r.status_code == 421 and r.json()["error"] == "unknown_host" and "rebound.example" in r.json()["message"]
    off = TestClient(HostCheckMiddleware(inner, allowed=None))  # a token guards the server instead
    assert off.get("/x", headers={"Host": "rebound.example"}).text == "served"


def _serve_like(status: int, text: str, ctype: str = "text/plain; charset=utf-8", headers=None):
    async def answer(request):
        return Response(text, status_code=status, media_type=ctype, headers=headers)
    return TestClient(ServeErrorJsonMiddleware(Starlette(routes=[Route("/{p:path}", answer)])))


def test_serve_plain_text_errors_leave_as_json_with_their_headers():
    r = _serve_like(503, "Request dropped due to backpressure (num_queued_requests=1, max_queued_requests=1).",
                    headers={"Retry-After": "2", "X-Request-ID": "abc"}).get("/v1/relations")
    assert r.status_code == 503 and r.headers["content-type"] == "application/json"
    assert r.json()["error"] == "overloaded" and r.json()["message"].startswith("Request dropped due to backpressure")
    assert r.headers["retry-after"] == "2" and r.headers["x-request-id"] == "abc"
    r = _serve_like(408, "Request abc timed out after 10.0s.").get("/")
    assert r.status_code == 408 and r.json() == {"error": "request_timeout", "message": "Request abc timed out after 10.0s."}
    assert _serve_like(404, "Path '/x' not found.").get("/x").json()["error"] == "not_found"


def test_other_answers_pass_untouched():
    assert _serve_like(200, "fine").get("/").text == "fine"  # not an error
    r = _serve_like(422, '{"error": "invalid_request", "message": "m"}', ctype="application/json").get("/")
    assert r.json() == {"error": "invalid_request", "message": "m"}  # the app's own JSON
    big = "x" * 100_000
    r = _serve_like(500, big).get("/")  # not one of Serve's one-line answers
    assert r.status_code == 500 and r.text == big and r.headers["content-type"].startswith("text/plain")


def test_proxy_timeout_must_leave_the_app_time_to_answer():
    sec = SecuritySettings(body_timeout_s=10, model_timeout_s=20)
    assert sec.proxy_timeout_floor_s() == 50
    sec.check_proxy_timeout(None)  # no proxy timeout: the app's own bound every request
    sec.check_proxy_timeout(50.5)
    with pytest.raises(ValueError, match="request_timeout_s=50 must exceed .* = 50 s"):
        sec.check_proxy_timeout(50)


@pytest.mark.parametrize("name", ["local", "gpu"])
def test_shipped_configs_let_the_app_answer_before_the_proxy(name):
    doc = yaml.safe_load((CONFIGS / f"{name}.yaml").read_text())
    for app in doc["applications"]:
        if app["import_path"].endswith("app_builder"):
            ServeAppConfig.model_validate(app["args"]).security.check_proxy_timeout(
                doc["http_options"].get("request_timeout_s"))
