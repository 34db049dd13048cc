"""Input limits, image decoding and authentication for the ingress: bad input is a 4xx, never a crash.

Every check runs before a model sees the request. Images are opened lazily and their header
size is checked before any pixel is decoded, so a decompression bomb (a tiny PNG declaring
50,000 x 50,000 pixels) costs nothing; PIL's own bomb guard is kept as a second line.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import io
import json
import os
import warnings
from typing import Any, Callable, Sequence

import numpy as np
from fastapi import HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from serve_apps.config import SecuritySettings

__all__ = ["STATE", "configure", "ApiError", "BodyLimitMiddleware", "check_token", "resolve_token", "decode_base64", "decode_image",
           "validate_boxes", "decode_masks", "validate_strings", "install_error_handlers", "error_response"]

_FORMATS = {"PNG", "JPEG", "WEBP", "BMP"}


# Per-process settings the middleware and auth dependency read. They live here (an importable
# module) because Serve ships the ingress class by value: a dict defined next to it would be a copy.
STATE: dict[str, Any] = {"max_request_bytes": 16 * 2**20, "token": None}


def configure(settings: SecuritySettings) -> None:
    """Install the limits and token of this replica (called from the ingress constructor)."""
    STATE["max_request_bytes"] = settings.max_request_bytes
    STATE["token"] = resolve_token(settings)


class ApiError(HTTPException):
    """An HTTP error with a short code and a message that names what is wrong."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(status_code=status, detail=message)
        self.code = code


def error_response(status: int, code: str, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": code, "message": message}, status_code=status, headers=headers)


class BodyLimitMiddleware:
    """ASGI middleware: 413 when Content-Length or the streamed body exceeds the limit."""

    def __init__(self, app, max_bytes: int | Callable[[], int]) -> None:
        self.app, self._max = app, max_bytes

    @property
    def max_bytes(self) -> int:
        return self._max() if callable(self._max) else self._max

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        too_big = error_response(413, "request_too_large", f"request body exceeds {self.max_bytes} bytes")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            return await too_big(scope, receive, send)
        seen = 0

        async def limited_receive():
            nonlocal seen
            msg = await receive()
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > self.max_bytes:
                    raise ApiError(413, "request_too_large", f"request body exceeds {self.max_bytes} bytes")
            return msg

        return await self.app(scope, limited_receive, send)


def resolve_token(settings: SecuritySettings) -> str | None:
    """The configured bearer token: inline, or read from the named environment variable."""
    if settings.bearer_token is not None:
        return settings.bearer_token.get_secret_value()
    if settings.bearer_token_env:
        value = os.environ.get(settings.bearer_token_env)
        if not value:
            raise ValueError(f"security.bearer_token_env={settings.bearer_token_env!r} is set but that "
                             "environment variable is empty or missing")
        return value
    return None


def check_token(request: Request, token: str | None) -> None:
    if token is None:
        return
    given = request.headers.get("authorization", "")
    scheme, _, value = given.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), token.encode()):
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


def decode_image(data: bytes, settings: SecuritySettings, field: str = "image") -> np.ndarray:
    """Encoded bytes -> (H, W, 3) uint8, refusing unknown formats and oversized images before decoding."""
    from PIL import Image

    if not data:
        raise ApiError(400, "bad_image", f"{field}: empty file")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            im = Image.open(io.BytesIO(data))
            fmt, (w, h) = im.format, im.size
            if fmt not in _FORMATS:
                raise ApiError(415, "unsupported_image", f"{field}: format {fmt} not accepted; use one of {sorted(_FORMATS)}")
            if w * h > settings.max_image_pixels or max(w, h) > settings.max_image_side:
                raise ApiError(413, "image_too_large", f"{field}: {w}x{h} exceeds the limit of "
                                                       f"{settings.max_image_pixels} pixels / {settings.max_image_side} px per side")
            im.load()
            return np.asarray(im.convert("RGB"))
    except ApiError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise ApiError(413, "image_too_large", f"{field}: rejected as a decompression bomb ({exc})") from None
    except (OSError, SyntaxError, ValueError, EOFError, MemoryError) as exc:
        raise ApiError(400, "bad_image", f"{field}: not a decodable image ({type(exc).__name__}: {exc})") from None


def validate_boxes(boxes: Sequence[Any], width: int, height: int, settings: SecuritySettings,
                   field: str = "boxes", min_count: int = 2) -> np.ndarray:
    """(N, 4) float array; every box finite, non-empty and inside the image, else 422 naming it."""
    if len(boxes) < min_count:
        raise ApiError(422, "invalid_regions", f"{field}: need at least {min_count} regions, got {len(boxes)}")
    if len(boxes) > settings.max_regions:
        raise ApiError(422, "too_many_regions", f"{field}: {len(boxes)} regions exceed the limit of {settings.max_regions}")
    arr = np.array([[b.x1, b.y1, b.x2, b.y2] for b in boxes], dtype=np.float64).reshape(-1, 4)
    for i, (x1, y1, x2, y2) in enumerate(arr):
        if not np.isfinite([x1, y1, x2, y2]).all():
            raise ApiError(422, "invalid_regions", f"{field}[{i}]: coordinates must be finite numbers")
        if not (0 <= x1 < x2 <= width and 0 <= y1 < y2 <= height):
            raise ApiError(422, "invalid_regions", f"{field}[{i}] = ({x1:g}, {y1:g}, {x2:g}, {y2:g}): must satisfy "
                                                   f"0 <= x1 < x2 <= {width} and 0 <= y1 < y2 <= {height} (image size)")
    return arr


def decode_masks(masks: Sequence[Any], width: int, height: int, settings: SecuritySettings) -> np.ndarray:
    """Uncompressed COCO RLE masks -> (N, H, W) bool, each matching the image and non-empty."""
    if len(masks) < 2 or len(masks) > settings.max_regions:
        raise ApiError(422, "invalid_regions", f"masks: need 2..{settings.max_regions} masks, got {len(masks)}")
    out = np.zeros((len(masks), height, width), dtype=bool)
    for i, m in enumerate(masks):
        if list(m.size) != [height, width]:
            raise ApiError(422, "invalid_regions", f"masks[{i}].size = {list(m.size)}: must be [{height}, {width}] (the image)")
        counts = np.asarray(m.counts, dtype=np.int64)
        if (counts < 0).any() or int(counts.sum()) != height * width:
            raise ApiError(422, "invalid_regions", f"masks[{i}].counts: runs must be >= 0 and sum to {height * width}")
        values = np.repeat(np.arange(len(counts)) % 2 == 1, counts)
        out[i] = values.reshape(width, height).T  # column-major, as COCO
        if not out[i].any():
            raise ApiError(422, "invalid_regions", f"masks[{i}]: empty mask")
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
        return error_response(exc.status_code, exc.code, str(exc.detail))

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
    async def _any(_: Request, exc: Exception):
        return error_response(500, "internal_error", f"{type(exc).__name__}: {str(exc)[:300]}")
