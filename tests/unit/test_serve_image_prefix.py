"""A JSON request's image pixels are reserved from the first bytes of its body (no Ray): the PNG or
JPEG header decoded from the leading base64 characters, so a request over the pixel budget is
refused before the rest of its body is read, before its JSON is parsed and before its base64 or
image is decoded (serve_apps/admission.py, ImageBudgetMiddleware). Over real HTTP:
tests/ray/test_serve_admission_budget_http.py."""

from __future__ import annotations

import asyncio
import base64
import io
import json

import numpy as np
import pytest
from fastapi.responses import JSONResponse
from PIL import Image

from serve_apps import security as S
from serve_apps.admission import ADMISSION, AdmissionMiddleware, ImageBudgetMiddleware, leading_image_size, reserve_pixels

BUDGET = 10_000


def _encoded(fmt: str, width: int, height: int, **save) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.zeros((height, width, 3), np.uint8)).save(buf, fmt, **save)
    return buf.getvalue()


def _body(image: bytes, prefix: str = "", image_first: bool = True, masks: int = 0) -> bytes:
    doc = {"image": prefix + base64.b64encode(image).decode()}
    rest = {"boxes": [{"x1": 0, "y1": 0, "x2": 1, "y2": 1}] * 2000, "masks": [{}] * masks}
    return json.dumps({**doc, **rest} if image_first else {**rest, **doc}).encode()


@pytest.mark.parametrize("fmt,save", [("PNG", {}), ("JPEG", {}), ("JPEG", {"exif": b"Exif\0\0" + bytes(30_000)})])
@pytest.mark.parametrize("prefix", ["", "data:image/png;base64,"])
def test_leading_image_size_reads_png_and_jpeg_headers_from_the_first_bytes(fmt, save, prefix):
    body = _body(_encoded(fmt, 123, 45, **save), prefix)
    assert leading_image_size(body, complete=True) == (123, 45)
    first = next(n for n in range(1, len(body)) if leading_image_size(body[:n], complete=False) != "more")
    assert leading_image_size(body[:first], complete=False) == (123, 45)
    assert first < (41_000 if save else 1_000), first  # the header, not the image: PNG ~60 bytes, JPEG ~850


def test_leading_image_size_gives_up_where_only_parsing_could_tell():
    png = _encoded("PNG", 50, 40)
    assert leading_image_size(_body(png, image_first=False), complete=True) is None  # "image" not the first key
    text = base64.b64encode(png).decode()
    assert leading_image_size(json.dumps({"image": text[:76] + "\n" + text[76:]}).encode(), complete=True) == (50, 40)
    escaped = json.dumps({"image": text[:8] + "\n" + text[8:]}).encode()  # an escape inside the header's characters
    assert leading_image_size(escaped, complete=True) is None
    assert leading_image_size(_body(_encoded("GIF", 50, 40)), complete=True) is None  # not PNG or JPEG
    assert leading_image_size(b'{"image": "not base64!"}', complete=True) is None
    assert leading_image_size(b'{"ima', complete=False) == "more" and leading_image_size(b'{"ima', complete=True) is None
    assert leading_image_size(b'{"image": "dat', complete=False) == "more"  # a data URL, or base64 starting so


async def _post(app, body: bytes, chunk: int = 4096) -> tuple[int, dict, dict, int]:
    """POST /v1/relations through ``app`` with the body in ``chunk``-byte messages; the status, headers,
    JSON answer and how many body messages the app pulled."""
    chunks = [body[i:i + chunk] for i in range(0, len(body), chunk)]
    pulled = 0

    async def receive():
        nonlocal pulled
        if pulled < len(chunks):
            pulled += 1
            return {"type": "http.request", "body": chunks[pulled - 1], "more_body": pulled < len(chunks)}
        await asyncio.sleep(3600)  # the client waits for its answer

    sent = []

    async def send(msg):
        sent.append(msg)

    scope = {"type": "http", "method": "POST", "path": "/v1/relations", "query_string": b"",
             "headers": [(b"content-length", str(len(body)).encode()), (b"content-type", b"application/json")]}
    await app(scope, receive, send)
    headers = {k.decode().lower(): v.decode() for k, v in sent[0].get("headers", [])}
    return sent[0]["status"], headers, json.loads(b"".join(m.get("body", b"") for m in sent[1:])), pulled


class _Route:
    """What the ingress route does: read the whole body, parse the JSON, decode the base64, read the
    image header and reserve image plus mask pixels (IngressDeployment._admit)."""

    def __init__(self) -> None:
        self.parsed, self.held = 0, None

    async def __call__(self, scope, receive, send):
        body, more = b"", True
        while more:
            msg = await receive()
            body, more = body + msg.get("body", b""), msg.get("more_body", False)
        doc = json.loads(body)
        self.parsed += 1
        w, h = S.image_header_size(S.decode_base64(doc["image"]))
        reserve_pixels(w * h * (1 + len(doc["masks"])), BUDGET, "image and masks")
        self.held = ADMISSION["pixels"]
        await JSONResponse({"body_bytes": len(body)})(scope, receive, send)


def _stack(route):
    """The ingress's middleware order (serve_apps/app.py): admission, body limit, image budget, route."""
    inner = S.BodyLimitMiddleware(ImageBudgetMiddleware(route, budget=BUDGET), max_bytes=2**24, timeout_s=5)
    return AdmissionMiddleware(inner, max_requests=4)


@pytest.fixture(autouse=True)
def _empty_budget():
    ADMISSION.update(requests=0, pixels=0)
    yield
    assert ADMISSION == {"requests": 0, "pixels": 0}  # every reservation left with its request


def test_an_image_over_the_budget_is_refused_before_the_body_is_read_or_parsed():
    route = _Route()
    body = _body(_encoded("PNG", 200, 200))  # 40,000 pixels > 10,000; ~90 KB of boxes behind it
    status, _, answer, pulled = asyncio.run(_post(_stack(route), body))
    assert (status, answer["error"]) == (413, "pixels_over_budget"), answer
    assert "40000 pixels" in answer["message"]
    assert route.parsed == 0 and pulled == 1, (route.parsed, pulled)  # one 4 KB message of ~19 read
    assert len(body) > 15 * 4096


def test_an_image_that_does_not_fit_beside_others_is_503_before_parsing():
    route = _Route()
    ADMISSION["pixels"] = BUDGET - 100  # other requests in flight
    status, headers, answer, pulled = asyncio.run(_post(_stack(route), _body(_encoded("JPEG", 20, 10))))
    ADMISSION["pixels"] = 0
    assert (status, answer["error"], headers["retry-after"]) == (503, "pixels_busy", "1"), answer
    assert route.parsed == 0 and pulled == 1


def test_an_admitted_body_reaches_the_route_whole_and_masks_add_to_the_image_reservation():
    route = _Route()
    body = _body(_encoded("PNG", 40, 50), masks=2)
    status, _, answer, _ = asyncio.run(_post(_stack(route), body, chunk=7))  # header split over many messages
    assert status == 200 and answer["body_bytes"] == len(body) and route.parsed == 1
    assert route.held == 40 * 50 * 3  # image reserved early, masks added: not the image twice


def test_a_body_the_first_bytes_cannot_size_is_checked_after_parsing():
    route = _Route()
    status, _, answer, _ = asyncio.run(_post(_stack(route), _body(_encoded("PNG", 200, 200), image_first=False)))
    assert (status, answer["error"]) == (413, "pixels_over_budget") and route.parsed == 1


def test_the_ingress_runs_the_image_budget_inside_the_body_limit():
    from serve_apps.app import api

    order = [m.cls for m in api.user_middleware]  # outermost first
    assert order.index(AdmissionMiddleware) < order.index(S.BodyLimitMiddleware) < order.index(ImageBudgetMiddleware)
    assert order[-1] is ImageBudgetMiddleware  # the last before the routes (and their JSON parsing)
