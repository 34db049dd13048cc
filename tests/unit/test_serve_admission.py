"""What answers before the app does (no Ray): the Host check (over HTTP:
tests/ray/test_serve_admission_http.py)."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from serve_apps.auth import HostCheckMiddleware, allowed_host_names, request_host

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
