"""The relate app without a token, on loopback, over real HTTP: only loopback Host names are
answered (DNS rebinding), every refusal is the API's JSON (the app's 504 before the proxy's
timeout, Serve's own ingress backpressure 503 through the proxy callback, a non-image upload's
400 without a Python repr), a proxy timeout that would cut the app off refuses to start, and
admission comes before work (a mask budget refused from the image header with the ingress's
peak memory measured, render labels checked before decoding, renders in a bounded pool with a
deadline).

The session's proxy runs our callback (conftest), so requests carry its token; the app itself has
none, which is what turns its Host check on. The app's model timeout is 1 ms, so every model call
is a 504 here: these tests are about what answers, not about scores."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import socket
import time

import httpx
import numpy as np
import pytest

from _serve_helpers import AUTH, SERVE_TOKEN, b64png, free_port

VOCAB = ["left of", "holding", "on top of", "near", "behind"]
IMG = np.random.default_rng(0).integers(0, 255, (48, 64, 3), dtype=np.uint8)
BOXES = [{"x1": 2, "y1": 2, "x2": 30, "y2": 30}, {"x1": 20, "y1": 10, "x2": 60, "y2": 44}]
PROXY_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 3.0
INGRESS_ONGOING, INGRESS_QUEUED = 3, 1


def _cfg(ckpt, port: int, model_timeout_s: float) -> dict:
    fast = {"graceful_shutdown_timeout_s": 0}
    return {"http": {"port": port},
            "security": {"body_timeout_s": BODY_TIMEOUT_S, "model_timeout_s": model_timeout_s,
                         "max_concurrent_renders": 1},
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


def test_a_slow_model_is_the_apps_json_504_before_the_proxy_timeout(app):
    t0 = time.monotonic()
    r = app["client"].post("/v1/relations", json={"image": b64png(IMG), "boxes": BOXES})
    took = time.monotonic() - t0
    assert r.status_code == 504 and r.json()["error"] == "model_timeout", r.text[:300]
    assert took < PROXY_TIMEOUT_S, took


def test_a_proxy_timeout_below_the_apps_own_refuses_to_start(app):
    """body 3 s + 2 x model 5 s = 13 s >= the proxy's 10 s: the proxy would answer first, in plain text."""
    from ray import serve

    from serve_apps.app import build_app

    with pytest.raises(RuntimeError):
        serve.run(build_app(_cfg(app["ckpt"], app["port"], model_timeout_s=5.0)), name="adm-slow",
                  route_prefix="/slow")
    why = serve.status().applications["adm-slow"].deployments["Ingress"].message
    serve.delete("adm-slow")
    assert "request_timeout_s=10 must exceed" in why and "= 13 s" in why, why


@pytest.mark.parametrize("data", [b"plain text, not an image", b"GIF89a" + b"\0" * 32, b"PK\x03\x04" + b"\0" * 40,
                                  b"<html><body>hi</body></html>", b"\x89PNG\r\n\x1a\n" + b"\0" * 16])
def test_a_non_image_upload_is_400_without_a_python_repr(app, data):
    params = json.dumps({"boxes": BOXES})
    up = app["client"].post("/v1/relations/upload", files={"image": ("x.png", io.BytesIO(data), "image/png")},
                            data={"params": params})
    b64 = app["client"].post("/v1/relations", json={"image": base64.b64encode(data).decode(),
                                                    "boxes": BOXES})
    for r in (up, b64):
        assert r.status_code in (400, 415), (r.status_code, r.text[:300])
        assert r.headers["content-type"] == "application/json"
        msg = r.json()["message"]
        assert "object at 0x" not in msg and "<_io" not in msg and "Traceback" not in msg, msg


def _hold(port: int) -> socket.socket:
    """A request whose body never completes: it holds an ingress slot until the body timeout."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall((f"POST /v1/relations HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {SERVE_TOKEN}\r\n"
               "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"image\": ").encode())
    return s


def _status_and_json(raw: bytes) -> tuple[int, dict[str, str], dict]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    return int(lines[0].split()[1]), headers, json.loads(body or b"null")


def test_a_full_ingress_queue_is_json_503_with_retry_after(app):
    """Serve itself answers when the ingress's own queue is full (max_queued_requests); through the
    proxy callback that answer carries the API's JSON body, with the ingress's Retry-After."""
    held = []
    try:
        for _ in range(INGRESS_ONGOING + INGRESS_QUEUED):  # one by one, so each is routed before the next
            held.append(_hold(app["port"]))
            time.sleep(0.3)

        async def burst():
            async with httpx.AsyncClient(base_url=app["url"], timeout=30, headers=AUTH) as c:
                return await asyncio.gather(*[c.get("/healthz") for _ in range(6)])

        replies = [(r.status_code, r.headers, r.json()) for r in asyncio.run(burst())]
    finally:
        for s in held:
            try:
                raw = s.recv(4096)
            except (socket.timeout, ConnectionResetError):
                raw = b""
            s.close()
            replies.append(_status_and_json(raw))
    print(f"\nheld, then a burst, over a full ingress: {[code for code, _, _ in replies]}")
    full = [(h, body) for code, h, body in replies if code == 503]
    assert full, replies
    for headers, body in full:
        assert headers["content-type"] == "application/json", body
        assert body["error"] == "overloaded" and body["message"].startswith("Request dropped due to backpressure")
        assert headers["retry-after"] == "2"
    for code, headers, body in replies:  # the held ones time out in the app (JSON 408) unless shed (503)
        assert code in (200, 408, 503) and headers["content-type"] == "application/json", (code, body)
    assert app["client"].get("/healthz").status_code == 200  # and it recovers


def _ingress_pid() -> int:
    """PID of this module's live ingress replica, from this Ray instance's actor table."""
    from ray._private.state import actors

    pids = [int(a["Pid"]) for a in actors().values()
            if a["State"] == "ALIVE" and a["Name"].startswith("SERVE_REPLICA::adm#Ingress#")]
    assert len(pids) == 1, pids
    return pids[0]


def _status_mb(pid: int, key: str) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) // 1024
    raise KeyError(key)


def test_a_mask_budget_over_the_limit_is_413_from_the_header_before_decoding(app):
    """5000 x 5000 with three full masks: 75 M mask pixels over the default 64 M. Decoding the
    picture alone would add 75 MB (its RGB array) to the ingress; the refusal must come first."""
    side = 5000
    image = b64png(np.zeros((side, side, 3), np.uint8))  # ~100 KB of PNG
    masks = [{"size": [side, side], "counts": [0, side * side]}] * 3
    pid = _ingress_pid()
    app["client"].get("/healthz")  # warm: the route and its imports are loaded before the mark
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")  # reset the kernel's peak-RSS mark of the ingress
    base = _status_mb(pid, "VmRSS")
    r = app["client"].post("/v1/relations", json={"image": image, "masks": masks})
    grew = _status_mb(pid, "VmHWM") - base
    print(f"\nmask budget refusal: ingress peak RSS grew {grew} MB")
    assert r.status_code == 413 and r.json()["error"] == "masks_too_large", r.text[:300]
    assert "3 masks of 5000x5000" in r.json()["message"]
    assert grew < 40, grew  # the decoded picture alone is 75 MB


@pytest.mark.parametrize("label", ["x" * 81, "cup\x1b[31m", "cup\u202eevil", "a\nb"])
def test_render_labels_obey_the_string_limits_before_decoding(app, label):
    boxes = [{**BOXES[0], "label": label}, BOXES[1]]
    # the image is no image at all: a label refused before decoding is a 422, not decode's 400
    r = app["client"].post("/v1/render", json={"image": base64.b64encode(b"no image").decode(), "boxes": boxes,
                                               "triplets": []})
    assert r.status_code == 422 and "boxes[0].label" in r.json()["message"], r.text[:300]


def test_renders_run_in_a_bounded_pool_with_a_deadline(app):
    """One render slot (max_concurrent_renders=1) and a 1 ms deadline: the first render answers 504
    at its deadline but keeps its slot while it draws, so the ones beside it get 503, not a queue."""
    img = b64png(np.random.default_rng(2).integers(0, 255, (400, 600, 3), dtype=np.uint8))
    body = {"image": img, "boxes": [{**BOXES[0], "label": "cup"}, BOXES[1]],
            "triplets": [{"subject": 0, "object": 1, "predicate": "near"}]}

    async def burst():
        async with httpx.AsyncClient(base_url=app["url"], timeout=60, headers=AUTH) as c:
            return await asyncio.gather(*[c.post("/v1/render", json=body) for _ in range(INGRESS_ONGOING)])

    replies = asyncio.run(burst())
    codes = [(r.status_code, r.json().get("error")) for r in replies]
    print(f"\nrender burst: {codes}")
    # the others are refused, never queued: render_busy from the pool, or, on a loaded machine where the
    # earlier renders still hold the ingress's slots, the ingress's own overloaded; an unbounded pool
    # would run them all into their deadline (504 each)
    assert (504, "render_timeout") in codes and any(c[0] == 503 for c in codes), codes
    assert all(c in ((504, "render_timeout"), (503, "render_busy"), (503, "overloaded")) for c in codes), codes
    assert all(r.headers.get("retry-after") for r in replies if r.status_code == 503)
    assert app["client"].get("/healthz").status_code == 200
