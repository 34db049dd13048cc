"""Admission before work in the ingress: what a replica holds at once is bounded before the body
is read, parsed or decoded, so a refused request costs next to nothing.

Two budgets per ingress replica (``SecuritySettings``):
* requests in flight (``max_inflight_requests``): model routes (POST ``/v1/...``) counted from
  their headers to their answer; one more is refused by :class:`AdmissionMiddleware` from the
  headers alone (503 + Retry-After), before ``receive`` is called once;
* pixels in flight (``max_inflight_pixels``): each request reserves its image's width x height
  plus its dense mask pixels, read from the image header (no pixel decoded), for as long as it is
  in flight (:func:`reserve_pixels`); past the budget a 503 + Retry-After, beyond the whole
  budget a 413. The model replicas only ever see what an ingress admitted, so this bounds the
  pixels (and mask bytes) they receive from it too.

For a JSON model request whose body opens with its ``"image"`` (as the page and the examples send
it), :class:`ImageBudgetMiddleware` reserves the image's pixels from the first body bytes: the
PNG or JPEG header decoded from the leading base64 characters, before the rest of the body is read,
before any JSON is parsed or base64 decoded. Only a JSON object's first key can be found without
parsing what precedes it, so a body with ``"image"`` later (or with escapes in its base64, or an
image whose header lies past the first 64 KB) is checked as before: from the image header after
the JSON is parsed, still before the decode. The masks' pixels are added then, once their count
is known; :func:`reserve_pixels` holds a request's total, not a sum of calls.
"""

from __future__ import annotations

import base64
import binascii
import collections
import contextvars
import re
import struct
from typing import Callable

from serve_apps.security import ApiError, error_response

__all__ = ["AdmissionMiddleware", "ImageBudgetMiddleware", "reserve_pixels", "leading_image_size", "ADMISSION"]

# Per-process counters (one ingress replica per process); module-level because Serve ships the
# ingress class by value.
ADMISSION: dict[str, int] = {"requests": 0, "pixels": 0}
_TICKET: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("relate.admission.ticket", default=None)


def _counted(scope) -> bool:
    return scope["type"] == "http" and scope.get("method") == "POST" and scope.get("path", "").startswith("/v1/")


class AdmissionMiddleware:
    """ASGI middleware: refuse a model request from its headers when this replica already holds
    ``max_requests`` of them; release its pixel reservations when it ends."""

    def __init__(self, app, max_requests: int | Callable[[], int], retry_after_s: int = 1) -> None:
        self.app, self._max, self.retry_after_s = app, max_requests, retry_after_s

    async def __call__(self, scope, receive, send):
        if not _counted(scope):
            return await self.app(scope, receive, send)
        limit = self._max() if callable(self._max) else self._max
        if ADMISSION["requests"] >= limit:
            busy = error_response(503, "overloaded", f"this replica holds {limit} requests already, retry later",
                                  headers={"Retry-After": str(self.retry_after_s)})
            return await busy(scope, receive, send)  # the body is never read
        ADMISSION["requests"] += 1
        ticket: list[int] = []
        token = _TICKET.set(ticket)
        try:
            return await self.app(scope, receive, send)
        finally:
            _TICKET.reset(token)
            ADMISSION["requests"] -= 1
            ADMISSION["pixels"] -= sum(ticket)


def reserve_pixels(pixels: int, budget: int, what: str) -> None:
    """Hold ``pixels`` in all of this replica's ``budget`` for the current request until it ends:
    what an earlier call held for it (the image, from the first body bytes) counts toward them, so
    the later call with image and masks adds only the masks (needs the middleware around the route;
    outside one, nothing is held)."""
    ticket = _TICKET.get()
    if ticket is None or pixels <= 0:
        return
    if pixels > budget:
        raise ApiError(413, "pixels_over_budget", f"{what}: {pixels} pixels exceed this server's in-flight budget of "
                                                  f"{budget} pixels")
    mine = sum(ticket)
    if pixels <= mine:
        return
    if ADMISSION["pixels"] - mine + pixels > budget:
        held = ADMISSION["pixels"] - mine
        raise ApiError(503, "pixels_busy", f"{what}: {pixels} pixels do not fit beside the {held} in flight "
                                           f"(budget {budget}), retry later",
                       headers={"Retry-After": "1"})
    ADMISSION["pixels"] += pixels - mine
    ticket.append(pixels - mine)


# ---- the image's pixels from the first bytes of a JSON body ------------------------------------
_JSON_ROUTES = frozenset({"/v1/relations", "/v1/graph", "/v1/judge", "/v1/render"})
_LEAD_WINDOW = 256  # bytes before the base64 starts: '{', the key, an optional data: URL prefix
PREFIX_BYTES = 65536  # at most this much body is held back to find the header (a JPEG's EXIF can be 64 KB)
# the body's first key is "image" (a JSON object's first key needs nothing before it parsed)
_KEY = re.compile(rb'\A\s*\{\s*"image"\s*:\s*"')
_BASE64 = re.compile(rb"[A-Za-z0-9+/]*")
_DATA_URL = b"data:"
_MORE = "more"  # the bytes so far end inside the header
_PNG = b"\x89PNG\r\n\x1a\n"
# SOF markers (baseline, progressive, lossless, arithmetic): C0-CF less DHT (C4), JPG (C8), DAC (CC)
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def _png_size(data: bytes) -> tuple[int, int] | str | None:
    if len(data) < 24:
        return _MORE if _PNG.startswith(data[:8]) else None
    if not data.startswith(_PNG) or data[12:16] != b"IHDR":  # IHDR is always the first chunk
        return None
    return struct.unpack(">II", data[16:24])


def _jpeg_size(data: bytes) -> tuple[int, int] | str | None:
    if len(data) < 2 or data[:2] != b"\xff\xd8":
        return _MORE if len(data) < 2 and b"\xff\xd8".startswith(data) else None
    i = 2
    while True:  # markers until the frame header; each segment's length skips its payload
        while i < len(data) and data[i] == 0xFF and i + 1 < len(data) and data[i + 1] == 0xFF:
            i += 1  # fill bytes
        if i + 4 > len(data):
            return _MORE
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker in _JPEG_SOF:
            if i + 9 > len(data):
                return _MORE
            height, width = struct.unpack(">HH", data[i + 5:i + 9])
            return width, height
        if marker in (0xD9, 0xDA):  # end of image or scan data before any frame header
            return None
        if marker == 0x01 or 0xD0 <= marker <= 0xD8:  # no length field
            i += 2
            continue
        i += 2 + struct.unpack(">H", data[i + 2:i + 4])[0]


def leading_image_size(body: bytes, complete: bool) -> tuple[int, int] | str | None:
    """(width, height) of a PNG or JPEG whose base64 opens the JSON object ``body`` (the first
    bytes of a request body; ``complete`` when there are no more); ``"more"`` when more bytes could
    still show it; None when this cheap read cannot tell (another first key, another format, an
    escape in the base64, a header past what was read): the parsed request is checked instead."""
    key = _KEY.match(body)
    if key is None:
        return _MORE if not complete and len(body) < _LEAD_WINDOW else None
    start = key.end()
    head = body[start:start + len(_DATA_URL)]
    if head == _DATA_URL:  # data:image/png;base64,<base64>
        comma = body.find(b",", start, start + 200)
        if comma < 0:
            return _MORE if not complete and len(body) < start + 200 else None
        if b'"' in body[start:comma] or b"\\" in body[start:comma]:
            return None
        start = comma + 1
    elif not complete and len(head) < len(_DATA_URL) and _DATA_URL.startswith(head):
        return _MORE  # a data URL's start, or base64 that happens to begin so: wait for five characters
    chars = _BASE64.match(body, start).group()
    ended = start + len(chars) < len(body) or complete  # a character other than base64 follows: the string ended
    try:
        data = base64.b64decode(chars[: len(chars) // 4 * 4], validate=True)
    except (binascii.Error, ValueError):
        return None
    for size_of in (_png_size, _jpeg_size):
        size = size_of(data)
        if size == _MORE:
            return None if ended or len(body) >= PREFIX_BYTES else _MORE
        if size is not None:
            return size if size[0] > 0 and size[1] > 0 else None
    return None


class ImageBudgetMiddleware:
    """ASGI middleware, inside the body limit: reserve a JSON request's image pixels from the first
    bytes of its body (:func:`leading_image_size`), so a request over the pixel budget gets its
    413 / 503 before the rest of its body is read, its JSON parsed or its base64 decoded. The bytes
    read are handed on unchanged; a body this read cannot size passes through to the route's check."""

    def __init__(self, app, budget: int | Callable[[], int]) -> None:
        self.app, self._budget = app, budget

    async def __call__(self, scope, receive, send):
        if not (_counted(scope) and scope["path"] in _JSON_ROUTES):
            return await self.app(scope, receive, send)
        held: collections.deque = collections.deque()
        prefix, size = b"", _MORE
        while size == _MORE:
            msg = await receive()
            held.append(msg)
            if msg["type"] != "http.request":
                break
            prefix += msg.get("body", b"")[: PREFIX_BYTES - len(prefix)]
            size = leading_image_size(prefix, complete=not msg.get("more_body", False))
        if size not in (None, _MORE):
            budget = self._budget() if callable(self._budget) else self._budget
            try:
                reserve_pixels(size[0] * size[1], budget, "image")
            except ApiError as exc:  # the rest of the body is never read
                return await error_response(exc.status_code, exc.code, str(exc.detail), exc.headers)(scope, receive, send)

        async def replay():
            return held.popleft() if held else await receive()

        return await self.app(scope, replay, send)
