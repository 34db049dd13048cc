"""Admission before work, over real HTTP (serve_apps/admission.py, the RelationModel's embedding
path): a request beyond what the ingress holds is refused from its headers before its body is
sent; pixels are budgeted per ingress replica from the image header (413 beyond the whole budget,
503 + Retry-After beyond what is left), from the first bytes of a JSON body that opens with its
image; a new vocabulary is embedded outside the shared batch, so a
default-bank request is answered while it embeds, and one new vocabulary too many is a 503.

The session's proxy runs our token callback (conftest), so requests carry its token."""

from __future__ import annotations

import asyncio
import json
import socket
import time
import uuid

import httpx
import numpy as np
import pytest

from _serve_helpers import AUTH, SERVE_TOKEN, b64png, free_port

VOCAB = ["left of", "holding", "on top of", "near", "behind"]
SMALL = np.random.default_rng(0).integers(0, 255, (48, 64, 3), dtype=np.uint8)
BOXES = [{"x1": 2, "y1": 2, "x2": 30, "y2": 30}, {"x1": 20, "y1": 10, "x2": 60, "y2": 44}]
MAX_REQUESTS = 2
PIXEL_BUDGET = 1_500_000


@pytest.fixture(scope="module")
def app(ray_session, tmp_path_factory):
    from ray import serve

    from serve_apps.app import build_app
    from serve_apps.tiny import save_tiny_checkpoint

    ckpt = save_tiny_checkpoint(tmp_path_factory.mktemp("budget") / "ckpt", VOCAB)
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port, "request_timeout_s": 60})
    fast = {"graceful_shutdown_timeout_s": 0}
    cfg = {"http": {"port": port},
           "security": {"body_timeout_s": 5, "model_timeout_s": 20, "max_inflight_requests": MAX_REQUESTS,
                        "max_inflight_pixels": PIXEL_BUDGET, "max_vocabulary": 512},
           "relation": {"checkpoint": str(ckpt), "max_batch_size": 4, "torch_threads": 1, "max_pending_embeddings": 1,
                        "deployment": {"num_replicas": 1, "num_cpus": 0.2, "max_ongoing_requests": 4,
                                       "max_queued_requests": 4, **fast}},
           "detector": None, "judge": None,
           "ingress": {"num_cpus": 0.05, "max_ongoing_requests": 16, **fast}}
    serve.run(build_app(cfg), name="budget", route_prefix="/")
    url = f"http://127.0.0.1:{port}"
    with httpx.Client(base_url=url, timeout=60, headers=AUTH) as client:
        assert client.post("/v1/relations", json={"image": b64png(SMALL), "boxes": BOXES}).status_code == 200
        yield {"client": client, "url": url, "port": port}
    serve.delete("budget")
    serve.shutdown()


def _head(port: int, length: int, first: bytes = b"") -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=15)
    s.sendall((f"POST /v1/relations HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {SERVE_TOKEN}\r\n"
               f"Content-Type: application/json\r\nContent-Length: {length}\r\n\r\n").encode() + first)
    return s


def _content_length(raw: bytes) -> int:
    for line in raw.partition(b"\r\n\r\n")[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


def test_a_request_over_the_ingress_budget_is_refused_before_its_body(app):
    held = [_head(app["port"], 1000, b'{"image": ') for _ in range(MAX_REQUESTS)]  # bodies never finish
    try:
        time.sleep(1.0)  # both reach the ingress
        s = _head(app["port"], 10_000_000)  # headers only: not one byte of the 10 MB body is sent
        t0 = time.monotonic()
        raw = s.recv(65536)
        took = time.monotonic() - t0
        while b"\r\n\r\n" in raw and len(raw.partition(b"\r\n\r\n")[2]) < _content_length(raw):
            more = s.recv(65536)  # the head and the body may arrive in separate segments
            if not more:
                break
            raw += more
        s.close()
    finally:
        for h in held:
            h.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    print(f"\nrefused from headers in {took * 1e3:.0f} ms: {head.splitlines()[0]!r}")
    assert head.startswith(b"HTTP/1.1 503"), raw[:300]
    assert b"retry-after: 1" in head.lower() and b"application/json" in head.lower()
    assert json.loads(body)["error"] == "overloaded"
    time.sleep(0.5)  # the held ones end (client gone) and free their places
    assert app["client"].post("/v1/relations", json={"image": b64png(SMALL), "boxes": BOXES}).status_code == 200


def test_an_image_over_the_whole_pixel_budget_is_413_from_its_header(app):
    big = np.zeros((1300, 1300, 3), np.uint8)  # 1.69 M pixels, under max_image_pixels, over the budget
    r = app["client"].post("/v1/relations", json={"image": b64png(big), "boxes": BOXES})
    assert r.status_code == 413 and r.json()["error"] == "pixels_over_budget", r.text[:300]
    assert "1690000 pixels" in r.json()["message"]


def test_an_image_over_the_budget_is_refused_from_the_first_bytes_of_its_json_body(app):
    """The body opens with the image: its PNG header, in the first base64 characters, is enough for
    the 413. Only those ~100 bytes of the announced body are ever sent, so an ingress that waited
    for the whole body (to parse the JSON) would answer 408 after body_timeout_s (5 s) instead."""
    body = json.dumps({"image": b64png(np.zeros((1300, 1300, 3), np.uint8)), "boxes": BOXES}).encode()
    s = _head(app["port"], len(body), body[:100])
    t0 = time.monotonic()
    raw = s.recv(65536)
    took = time.monotonic() - t0
    while b"\r\n\r\n" in raw and len(raw.partition(b"\r\n\r\n")[2]) < _content_length(raw):
        more = s.recv(65536)
        if not more:
            break
        raw += more
    s.close()
    head, _, answer = raw.partition(b"\r\n\r\n")
    print(f"\nrefused from the first 100 of {len(body)} body bytes in {took * 1e3:.0f} ms: {head.splitlines()[0]!r}")
    assert head.startswith(b"HTTP/1.1 413"), raw[:300]
    assert json.loads(answer)["error"] == "pixels_over_budget" and took < 4.0, (answer, took)
    assert app["client"].post("/v1/relations", json={"image": b64png(SMALL), "boxes": BOXES}).status_code == 200


def test_pixels_in_flight_and_new_vocabularies_are_budgeted_and_embedding_stalls_nobody(app):
    """A holds 1 M pixels while its fresh 512-string vocabulary is embedded; meanwhile B (another
    1 M pixels) is a 503 pixels_busy, D (another new vocabulary) a 503 vocabulary_busy, and C
    (default bank) is answered before A is."""
    fresh = lambda: [f"relation {i} {uuid.uuid4().hex[:8]}" for i in range(512)]  # noqa: E731
    mid = b64png(np.zeros((1000, 1000, 3), np.uint8))

    async def run():
        async with httpx.AsyncClient(base_url=app["url"], timeout=60, headers=AUTH) as c:
            t0 = time.monotonic()
            a = asyncio.ensure_future(c.post("/v1/relations", json={"image": mid, "boxes": BOXES, "vocabulary": fresh()}))
            await asyncio.sleep(0.5)
            assert not a.done(), "A finished before the others were sent: embedding was too fast to test against"
            b = await c.post("/v1/relations", json={"image": mid, "boxes": BOXES})
            d = await c.post("/v1/relations", json={"image": b64png(SMALL), "boxes": BOXES, "vocabulary": fresh()})
            cc = await c.post("/v1/relations", json={"image": b64png(SMALL), "boxes": BOXES})
            c_at, a_done_first = time.monotonic() - t0, a.done()
            ra = await a
            return ra, b, cc, d, c_at, time.monotonic() - t0, a_done_first

    ra, b, cc, d, c_at, a_at, a_done_first = asyncio.run(run())
    print(f"\nA (new vocabulary) answered after {a_at:.2f} s, C (default bank) after {c_at:.2f} s; "
          f"B {b.status_code} {b.json().get('error')}, D {d.status_code} {d.json().get('error')}")
    assert ra.status_code == 200 and len(ra.json()["triplets"]) > 0, ra.text[:300]
    assert b.status_code == 503 and b.json()["error"] == "pixels_busy" and b.headers["retry-after"] == "1", b.text[:300]
    assert d.status_code == 503 and d.json()["error"] == "vocabulary_busy" and d.headers["retry-after"] == "1", d.text
    assert cc.status_code == 200 and not a_done_first, (cc.status_code, a_done_first)
    # the budget is whole again once A is answered
    assert app["client"].post("/v1/relations", json={"image": mid, "boxes": BOXES}).status_code == 200
