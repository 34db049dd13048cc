"""Serve's own error answers in the API's JSON shape, at the HTTP proxy.

A few refusals never reach an app: the proxy answers them itself, as ``text/plain``. Ray Serve
2.60 lets a deployment choose only the status and ``Retry-After`` of its backpressure answer
(``BackpressureConfig``: ``status_code`` 503 or 429, ``retry_after_s``); its body is the fixed
text "Request dropped due to backpressure". The proxy's own ``request_timeout_s`` (408), an
unavailable deployment (503) and an unknown route (404) are fixed text too. The only code that
runs in front of those answers is a proxy middleware (the callback every node installs with
``RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH``, :func:`serve_apps.auth.proxy_middlewares`), so
:class:`ServeErrorJsonMiddleware` is installed there and rewrites them to ``{error, message}``,
keeping the status and every other header (``Retry-After``, ``X-Request-ID``). Apps answer JSON
already; only plain-text error answers are touched.
"""

from __future__ import annotations

import json

__all__ = ["ServeErrorJsonMiddleware", "serve_error_code"]

_MAX_BODY = 64 * 1024  # Serve's answers are one line; anything larger is passed through untouched


def serve_error_code(status: int, text: str) -> str:
    """The API's error code for one of Serve's plain-text answers."""
    if status in (429, 503) and "backpressure" in text.lower():
        return "overloaded"
    return {404: "not_found", 408: "request_timeout", 500: "internal_error", 503: "unavailable"}.get(status, "http_error")


class ServeErrorJsonMiddleware:
    """ASGI: an HTTP answer with status >= 400 and a ``text/plain`` body leaves as JSON
    ``{"error": code, "message": the text}`` with the same status and other headers."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        held: dict | None = None  # a plain-text error's start message, while its body is collected
        body = b""

        async def rewrite(msg) -> None:
            nonlocal held, body
            if msg["type"] == "http.response.start":
                ctype = dict(msg.get("headers") or []).get(b"content-type", b"")
                if msg["status"] >= 400 and ctype.startswith(b"text/plain"):
                    held = msg
                    return None
                return await send(msg)
            if held is None or msg["type"] != "http.response.body":
                return await send(msg)
            body += msg.get("body", b"")
            if len(body) > _MAX_BODY:  # not one of Serve's one-line answers: pass it on as it came
                start, held = held, None
                await send(start)
                return await send({**msg, "body": body})
            if msg.get("more_body", False):
                return None
            text = body.decode("utf-8", "replace").strip()
            out = json.dumps({"error": serve_error_code(held["status"], text), "message": text}).encode()
            headers = [(k, v) for k, v in held.get("headers") or [] if k.lower() not in (b"content-type",
                                                                                       b"content-length")]
            headers += [(b"content-type", b"application/json"), (b"content-length", str(len(out)).encode())]
            start, held = {**held, "headers": headers}, None
            await send(start)
            return await send({"type": "http.response.body", "body": out})

        return await self.app(scope, receive, rewrite)
