"""The relate app without a token, on loopback, over real HTTP: only loopback Host names are
answered (DNS rebinding).

The session's proxy runs our callback (conftest), so requests carry its token; the app itself has
none, which is what turns its Host check on."""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from _serve_helpers import AUTH, free_port

VOCAB = ["left of", "holding", "on top of", "near", "behind"]
IMG = np.random.default_rng(0).integers(0, 255, (48, 64, 3), dtype=np.uint8)
BOXES = [{"x1": 2, "y1": 2, "x2": 30, "y2": 30}, {"x1": 20, "y1": 10, "x2": 60, "y2": 44}]
PROXY_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 3.0
INGRESS_ONGOING, INGRESS_QUEUED = 3, 1


def _cfg(ckpt, port: int, model_timeout_s: float) -> dict:
    fast = {"graceful_shutdown_timeout_s": 0}
    return {"http": {"port": port},
            "security": {"body_timeout_s": BODY_TIMEOUT_S, "model_timeout_s": model_timeout_s},
            "relation": {"checkpoint": str(ckpt), "max_batch_size": 1, "torch_threads": 1,
                         "deployment": {"num_replicas": 1, "num_cpus": 0.2, "max_ongoing_requests": 1,
                                        "max_queued_requests": 1, **fast}},
            "detector": None, "judge": None,
            "ingress": {"num_cpus": 0.05, "max_ongoing_requests": INGRESS_ONGOING,
                        "max_queued_requests": INGRESS_QUEUED, "retry_after_s": 2, **fast}}


@pytest.fixture(scope="module")
def app(ray_session, tmp_path_factory):
    from ray import serve

    from serve_apps.app import build_app
    from serve_apps.tiny import save_tiny_checkpoint

    ckpt = save_tiny_checkpoint(tmp_path_factory.mktemp("adm") / "ckpt", VOCAB)
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port, "request_timeout_s": PROXY_TIMEOUT_S})
    serve.run(build_app(_cfg(ckpt, port, model_timeout_s=0.001)), name="adm", route_prefix="/")
    url = f"http://127.0.0.1:{port}"
    with httpx.Client(base_url=url, timeout=60, headers=AUTH) as client:
        yield {"client": client, "url": url, "port": port, "ckpt": ckpt}
    serve.delete("adm")
    serve.shutdown()


def test_only_loopback_host_names_are_answered_without_a_token(app):
    port = app["port"]
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost", f"[::1]:{port}", f"LOCALHOST:{port}"):
        for path in ("/healthz", "/ui/relate.html"):
            r = app["client"].get(path, headers={"Host": host})
            assert r.status_code == 200, (host, path, r.status_code, r.text[:200])
    for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.nip.io", f"localhost.evil.example:{port}", ""):
        for path in ("/healthz", "/ui/relate.html", "/v1/relations", "/openapi.json"):
            r = app["client"].get(path, headers={"Host": host})
            assert r.status_code == 421, (host, path, r.status_code, r.text[:200])
            assert r.headers["content-type"] == "application/json" and r.json()["error"] == "unknown_host"
