"""Input limits, image decoding and authentication for the ingress: bad input is a 4xx, never a crash.

Every check runs before a model sees the request. Images and boxes are checked by
``relate.inputs`` (the same functions ``relate predict`` uses: a decompression bomb is refused
from its header before any pixel is decoded); this module applies the configured limits and
turns a refusal into an HTTP error.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import io
import json
import logging
import re
import warnings
from typing import Any, Callable, Sequence

import numpy as np
from fastapi import HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from relate import inputs
from relate.inputs import InputError
from relate.rle import RLEError, check_rle
from serve_apps.auth import AuthConfigError, read_token, token_matches
from serve_apps.config import SecuritySettings

__all__ = ["STATE", "configure", "ApiError", "BodyLimitMiddleware", "check_token", "resolve_token", "decode_base64", "decode_image",
           "image_header_size", "check_mask_budget", "validate_boxes", "validate_masks", "validate_triplets", "validate_strings", "install_error_handlers", "error_response"]

# relate.inputs says what is wrong; which HTTP status that is belongs to the ingress
_STATUS = {"bad_image": 400, "unsupported_image": 415, "image_too_large": 413, "invalid_regions": 422,
           "too_many_regions": 422}
_log = logging.getLogger("ray.serve")
_OBJECT_REPR = re.compile(r"\s*<[^<>]*\bobject at 0x[0-9a-fA-F]+>")


# Per-process settings the middleware and auth dependency read. They live here (an importable
# module) because Serve ships the ingress class by value: a dict defined next to it would be a copy.
STATE: dict[str, Any] = {"max_request_bytes": 16 * 2**20, "body_timeout_s": 30.0, "token": None,
                         "max_inflight_requests": 64, "max_inflight_pixels": 100_000_000}


def configure(settings: SecuritySettings) -> None:
    """Install the limits and token of this replica (called from the ingress constructor)."""
    STATE["max_request_bytes"] = settings.max_request_bytes
    STATE["body_timeout_s"] = settings.body_timeout_s
    STATE["max_inflight_requests"] = settings.max_inflight_requests
    STATE["max_inflight_pixels"] = settings.max_inflight_pixels
    STATE["token"] = resolve_token(settings)


class ApiError(HTTPException):
    """An HTTP error with a short code and a message that names what is wrong."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(status_code=status, detail=message, headers=headers)
        self.code = code


def error_response(status: int, code: str, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": code, "message": message}, status_code=status, headers=headers)


class BodyLimitMiddleware:
    """ASGI middleware: 413 when Content-Length or the streamed body exceeds the limit, 408 when
    the body does not arrive in time (a slow or stalled client must not hold a connection), 400
    when the client closes before sending the body it announced."""

    def __init__(self, app, max_bytes: int | Callable[[], int], timeout_s: float | Callable[[], float] = 30.0) -> None:
        self.app, self._max, self._timeout = app, max_bytes, timeout_s

    @property
    def max_bytes(self) -> int:
        return self._max() if callable(self._max) else self._max

    @property
    def timeout_s(self) -> float:
        return self._timeout() if callable(self._timeout) else self._timeout

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        limit = self.max_bytes
        if declared is not None and (not declared.isdigit() or len(declared) > 18 or int(declared) > limit):
            too_big = error_response(413, "request_too_large", f"request body exceeds {limit} bytes")
            return await too_big(scope, receive, send)
        seen, deadline = 0, asyncio.get_running_loop().time() + self.timeout_s
        body_done, started = False, False

        async def limited_receive():
            nonlocal seen, body_done
            if body_done:  # after the body only a disconnect can come: wait for it without a deadline
                return await receive()
            left = deadline - asyncio.get_running_loop().time()
            try:
                msg = await asyncio.wait_for(receive(), timeout=max(left, 0.001))
            except asyncio.TimeoutError:
                raise ApiError(408, "request_timeout", f"request body not received within {self.timeout_s:g} s") from None
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > limit:
                    raise ApiError(413, "request_too_large", f"request body exceeds {limit} bytes")
                body_done = not msg.get("more_body", False)
                if body_done and declared is not None and seen != int(declared):
                    raise ApiError(400, "bad_request", f"body has {seen} bytes, Content-Length said {int(declared)}")
            elif msg["type"] == "http.disconnect" and not body_done:
                raise ApiError(400, "client_disconnected", f"client closed the connection after {seen} body bytes")
            return msg

        async def tracked_send(msg):
            nonlocal started
            started = started or msg["type"] == "http.response.start"
            await send(msg)

        try:
            return await self.app(scope, limited_receive, tracked_send)
        except ApiError as exc:  # raised while reading the body, outside any route's handler
            if started:
                raise
            return await error_response(exc.status_code, exc.code, str(exc.detail))(scope, receive, send)


def resolve_token(settings: SecuritySettings) -> str | None:
    """The configured bearer token: inline, from the named environment variable or from a file."""
    secret = settings.bearer_token.get_secret_value() if settings.bearer_token is not None else None
    try:
        return read_token(secret, settings.bearer_token_env, settings.bearer_token_file)
    except AuthConfigError as exc:
        raise AuthConfigError(f"security: {exc}") from None


def check_token(request: Request, token: str | None) -> None:
    if token is not None and not token_matches(request.headers.get("authorization"), token):
        raise ApiError(401, "unauthorized", "missing or wrong bearer token (send 'Authorization: Bearer <token>')")


def decode_base64(text: str, field: str = "image") -> bytes:
    if text.startswith("data:"):
        _, sep, text = text.partition(",")
        if not sep:
            raise ApiError(400, "bad_image", f"{field}: data URL has no ',' before the payload")
    try:
        return base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ApiError(400, "bad_image", f"{field}: not valid base64 ({exc})") from None


def _api_error(exc: InputError) -> ApiError:
    # PIL names an unreadable upload by its file object's repr ('<_io.BytesIO object at 0x...>'): an
    # address of this process, and noise to the client; the message stands without it
    return ApiError(_STATUS[exc.code], exc.code, _OBJECT_REPR.sub("", str(exc)))


def decode_image(data: bytes, settings: SecuritySettings, field: str = "image") -> np.ndarray:
    """Encoded bytes -> (H, W, 3) uint8 under the configured size limits (``relate.inputs.decode_image``)."""
    try:
        return inputs.decode_image(data, settings.max_image_pixels, settings.max_image_side, field)
    except InputError as exc:
        raise _api_error(exc) from None


def validate_boxes(boxes: Sequence[Any], width: int, height: int, settings: SecuritySettings,
                   field: str = "boxes", min_count: int = 2) -> np.ndarray:
    """(N, 4) float array; every box finite, non-empty and inside the image, else 422 naming it."""
    try:
        return inputs.check_boxes([(b.x1, b.y1, b.x2, b.y2) for b in boxes], width, height, settings.max_regions,
                                  field, min_count)
    except InputError as exc:
        raise _api_error(exc) from None


def image_header_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) the image's header declares, read without decoding a pixel; None when no
    header can be read (``decode_image`` then says why). An EXIF orientation may swap the two in
    the decoded picture, so only checks that do not care (pixel counts) may use it."""
    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # PIL's bomb warning: decode_image refuses those itself
            with Image.open(io.BytesIO(data)) as im:
                return im.size
    except Exception:  # noqa: BLE001  any unreadable header: decode_image gives the precise refusal
        return None


def check_mask_budget(count: int, height: int, width: int, settings: SecuritySettings) -> None:
    """413 when ``count`` dense masks of ``height`` x ``width`` exceed ``max_mask_pixels``."""
    dense = count * height * width
    if dense > settings.max_mask_pixels:
        raise ApiError(413, "masks_too_large", f"masks: {count} masks of {height}x{width} are {dense} mask pixels, "
                                               f"above the limit of {settings.max_mask_pixels} per request")


def validate_masks(masks: Sequence[Any], width: int, height: int, settings: SecuritySettings) -> dict[str, Any]:
    """Uncompressed COCO RLE masks, checked without expanding them -> a compact mask set.

    Limits come from the request itself: each run is bounded by the image's pixel count and the
    runs are summed in exact integers (a 263-byte request with runs near 2**63 once wrapped an
    int64 sum and crashed the expansion), and the dense size the model will need, masks x height x
    width, is bounded by ``max_mask_pixels`` before anything is allocated. The result holds runs,
    not pixels; :func:`relate.rle.decode_rle` expands them where the model runs."""
    if len(masks) < 2 or len(masks) > settings.max_regions:
        raise ApiError(422, "invalid_regions", f"masks: need 2..{settings.max_regions} masks, got {len(masks)}")
    check_mask_budget(len(masks), height, width, settings)
    runs = []
    for i, m in enumerate(masks):
        if list(m.size) != [height, width]:
            raise ApiError(422, "invalid_regions", f"masks[{i}].size = {list(m.size)}: must be [{height}, {width}] (the image)")
        try:
            runs.append(check_rle(m.counts, height, width))
        except RLEError as exc:
            raise ApiError(422, "invalid_regions", f"masks[{i}].counts: {exc}") from None
    return {"rle_counts": runs, "height": height, "width": width}


def validate_triplets(triplets: Sequence[Any], num_boxes: int, settings: SecuritySettings,
                      field: str = "triplets") -> list[dict]:
    """Render edges: bounded in number and label length, indices inside the box list."""
    if len(triplets) > settings.max_render_triplets:
        raise ApiError(422, "too_many_triplets", f"{field}: {len(triplets)} edges exceed the limit of "
                                                 f"{settings.max_render_triplets}")
    out = []
    for i, t in enumerate(triplets):
        if t.subject >= num_boxes or t.object >= num_boxes:
            raise ApiError(422, "invalid_request", f"{field}[{i}]: index out of range for {num_boxes} boxes")
        pred = validate_strings([t.predicate], 1, settings.max_string_chars, f"{field}[{i}].predicate")[0]
        out.append({"subject": int(t.subject), "object": int(t.object), "predicate": pred})
    return out


def validate_strings(strings: Sequence[str], limit: int, max_chars: int, field: str) -> list[str]:
    """Stripped, non-empty, unique, bounded strings, else 422 naming the position."""
    if not strings:
        raise ApiError(422, "invalid_vocabulary", f"{field}: must hold at least one string")
    if len(strings) > limit:
        raise ApiError(422, "vocabulary_too_large", f"{field}: {len(strings)} strings exceed the limit of {limit}")
    out, seen = [], {}
    for i, s in enumerate(strings):
        t = s.strip()
        if not t or len(t) > max_chars or not t.isprintable():
            raise ApiError(422, "invalid_vocabulary", f"{field}[{i}]: must be 1..{max_chars} printable characters")
        if t in seen:
            raise ApiError(422, "invalid_vocabulary", f"{field}[{i}] {t!r} repeats {field}[{seen[t]}]")
        seen[t] = i
        out.append(t)
    return out


def _loc(err: dict) -> str:
    parts = [str(p) for p in err.get("loc", ()) if p != "body"]
    return ".".join(parts) or "body"


def install_error_handlers(app) -> None:
    """Every error leaves as JSON {error, message}; unexpected ones as 500 without a traceback."""

    @app.exception_handler(ApiError)
    async def _api(_: Request, exc: ApiError):
        return error_response(exc.status_code, exc.code, str(exc.detail), headers=exc.headers)

    @app.exception_handler(StarletteHTTPException)  # also routing 404/405 and body-parse 400s
    async def _http(_: Request, exc: StarletteHTTPException):
        return error_response(exc.status_code, "http_error", str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError):
        msgs = [f"{_loc(e)}: {e.get('msg', 'invalid')}" for e in exc.errors()[:10]]
        return error_response(422, "invalid_request", "; ".join(msgs) or "invalid request")

    @app.exception_handler(json.JSONDecodeError)
    async def _json(_: Request, exc: json.JSONDecodeError):
        return error_response(400, "bad_json", f"body is not valid JSON: {exc}")

    @app.exception_handler(Exception)
    async def _any(request: Request, exc: Exception):
        # the client learns nothing of the internals; the log has the traceback
        _log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(500, "internal_error", "internal error; the server log has the details")
