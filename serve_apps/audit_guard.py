"""What stands between the network and the human-review pages (the audit page, the pair review page):
personal tokens, small bodies, strict headers, and who is acting.

The audit page decides what a relation corpus is worth, so a verdict must come from the person it
is filed under. Each auditor has their own bearer token (a tokens file maps name to token); the
server takes the auditor's identity from the token, never from the request. The token checks
themselves are :mod:`serve_apps.auth`'s (constant time, same refusal to bind beyond loopback
without one); this module adds the many-auditors part and the browser-facing headers.

Tokens file: either a JSON object ``{"alice": "<token>", "bob": "<token>"}`` or one ``name:token``
per line (blank lines and ``#`` comments ignored). Tokens are at least 16 printable characters.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Iterable

from fastapi import HTTPException
from starlette.datastructures import Headers
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.responses import JSONResponse

from relate.audit.store import AuditStoreError, check_auditor
from serve_apps.auth import AuthConfigError, allowed_host_names, read_token, token_matches

__all__ = ["TOKENS_FILE_ENV", "AUDITOR_SCOPE_KEY", "CSP", "AuditorTokens", "load_auditor_tokens",
           "AuditorAuthMiddleware", "SmallBodyMiddleware", "SecurityHeadersMiddleware", "COMMON_STATIC_DIR",
           "serve_page", "acting_person"]

COMMON_STATIC_DIR = Path(__file__).parent / "static" / "common"  # page.js: what every review page's script shares

TOKENS_FILE_ENV = "RELATE_AUDIT_TOKENS_FILE"
AUDITOR_SCOPE_KEY = "relate.auditor"  # where the middleware leaves the token's auditor for the routes
# No inline script or style anywhere on the page; images are PNGs from /api/image turned into blob: URLs.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
       "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
_SECURITY_HEADERS = ((b"content-security-policy", CSP.encode()), (b"x-content-type-options", b"nosniff"),
                     (b"referrer-policy", b"no-referrer"), (b"x-frame-options", b"DENY"))


class AuditorTokens:
    """Auditor name <-> bearer token. A lookup compares against every token (no early exit, no
    dict lookup keyed by the secret), so its time does not say which token nearly matched."""

    def __init__(self, pairs: dict[str, str], source: str) -> None:
        if not pairs:
            raise AuthConfigError(f"{source} names no auditor tokens")
        seen: dict[str, str] = {}
        for name, token in pairs.items():
            if token in seen:
                raise AuthConfigError(f"{source}: auditors {seen[token]!r} and {name!r} share a token; "
                                      "each auditor needs their own")
            seen[token] = name
        self._pairs = tuple(pairs.items())
        self.source = source

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self._pairs]

    def auditor_for(self, authorization: str | None) -> str | None:
        """The auditor whose token the ``Authorization`` header carries, or None."""
        found = None
        for name, token in self._pairs:
            if token_matches(authorization, token) and found is None:
                found = name
        return found


def _parse_tokens(text: str, source: str) -> dict[str, str]:
    """Name -> raw token from a JSON object or ``name:token`` lines."""
    if text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise AuthConfigError(f"{source}: not valid JSON ({exc.msg}, line {exc.lineno})") from None
        if not all(isinstance(v, str) for v in data.values()):
            raise AuthConfigError(f"{source}: every value must be a token string")
        return dict(data)
    pairs: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, token = line.partition(":")
        if not sep:
            raise AuthConfigError(f"{source} line {n}: expected 'name:token'")
        if name.strip() in pairs:
            raise AuthConfigError(f"{source} line {n}: auditor {name.strip()!r} appears twice")
        pairs[name.strip()] = token
    return pairs


def load_auditor_tokens(path: str | Path) -> AuditorTokens:
    """Read and check a tokens file: valid auditor names, strong distinct tokens (never echoed)."""
    source = f"tokens file {path}"
    if not Path(path).is_file():
        raise AuthConfigError(f"{source} does not exist")
    pairs: dict[str, str] = {}
    for name, raw in _parse_tokens(Path(path).read_text(), source).items():
        try:
            name = check_auditor(name)
        except AuditStoreError as exc:
            raise AuthConfigError(f"{source}: {exc}") from None
        if not raw.strip():
            raise AuthConfigError(f"{source}: auditor {name!r} has an empty token")
        try:
            pairs[name] = read_token(token=raw) or ""
        except AuthConfigError as exc:
            raise AuthConfigError(f"{source}: auditor {name!r} has a bad token ({exc})") from None
    return AuditorTokens(pairs, source)


def _json_error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": code, "message": message}, status_code=status, headers=headers)


class AuditorAuthMiddleware:
    """ASGI: with tokens configured, every request outside the page shell needs an auditor's token
    (401 otherwise); the token's auditor is left in ``scope[AUDITOR_SCOPE_KEY]`` for the routes."""

    def __init__(self, app, tokens: AuditorTokens | None, open_paths: Iterable[str] = ("/",),
                 open_prefixes: Iterable[str] = ("/static/audit/",)) -> None:
        self.app, self.tokens = app, tokens
        self.open_paths, self.open_prefixes = frozenset(open_paths), tuple(open_prefixes)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or self.tokens is None:
            return await self.app(scope, receive, send)
        auditor = self.tokens.auditor_for(Headers(scope=scope).get("authorization"))
        scope[AUDITOR_SCOPE_KEY] = auditor
        path = scope.get("path", "")
        if auditor is not None or path in self.open_paths or path.startswith(self.open_prefixes):
            return await self.app(scope, receive, send)
        return await _json_error(401, "unauthorized", "missing or unknown auditor token (send 'Authorization: "
                                 "Bearer <your token>')", {"WWW-Authenticate": 'Bearer realm="audit"'}
                                 )(scope, receive, send)


class SmallBodyMiddleware:
    """ASGI: 413 for a body over ``max_bytes`` (by Content-Length, or counted as it streams), 408
    for one that does not arrive within ``timeout_s``. Audit bodies are a few dozen bytes, so the
    body is read whole here and replayed to the app."""

    def __init__(self, app, max_bytes: int, timeout_s: float = 10.0) -> None:
        self.app, self.max_bytes, self.timeout_s = app, max_bytes, timeout_s

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        too_big = _json_error(413, "request_too_large", f"request body exceeds {self.max_bytes} bytes")
        declared = Headers(scope=scope).get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            return await too_big(scope, receive, send)
        chunks, size, more = [], 0, True
        try:
            async with asyncio.timeout(self.timeout_s):
                while more:
                    msg = await receive()
                    if msg["type"] == "http.disconnect":
                        return None
                    chunks.append(msg.get("body", b""))
                    size += len(chunks[-1])
                    if size > self.max_bytes:
                        return await too_big(scope, receive, send)
                    more = msg.get("more_body", False)
        except TimeoutError:
            return await _json_error(408, "request_timeout", f"request body not received within "
                                     f"{self.timeout_s:g} s")(scope, receive, send)
        body, replayed = b"".join(chunks), False

        async def replay():
            nonlocal replayed
            if replayed:
                return await receive()  # only a disconnect can follow
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        return await self.app(scope, replay, send)


class SecurityHeadersMiddleware:
    """ASGI: the Content-Security-Policy and its companions on every response, errors included."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def with_headers(msg):
            if msg["type"] == "http.response.start":
                names = {name for name, _ in _SECURITY_HEADERS}
                msg = {**msg, "headers": [(k, v) for k, v in msg.get("headers", []) if k.lower() not in names]
                       + list(_SECURITY_HEADERS)}
            await send(msg)

        return await self.app(scope, receive, with_headers)


def serve_page(app, name: str, static_dir: Path, *, tokens: AuditorTokens | None, host: str,
               allowed_hosts: Iterable[str], max_body_bytes: int) -> None:
    """Mount a review page's static files (``/static/<name>``, and ``/static/common``, which its script
    shares with the other pages) and put the app behind the guards every such page has. ``add_middleware``
    wraps, so the last added runs first: headers go on every answer, refusals included; then the Host
    check (DNS rebinding), the body limit, and the token check, which lets only the page shell through."""
    from fastapi.staticfiles import StaticFiles

    app.mount(f"/static/{name}", StaticFiles(directory=static_dir), name=f"{name}-static")
    app.mount("/static/common", StaticFiles(directory=COMMON_STATIC_DIR), name=f"{name}-common-static")
    app.add_middleware(AuditorAuthMiddleware, tokens=tokens, open_prefixes=(f"/static/{name}/", "/static/common/"))
    app.add_middleware(SmallBodyMiddleware, max_bytes=max_body_bytes)
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=allowed_host_names(host, list(allowed_hosts)),
                       www_redirect=False)
    app.add_middleware(SecurityHeadersMiddleware)


def acting_person(request, claimed: str | None, role: str = "auditor") -> str:
    """Who is acting: the token's person when tokens are configured (a different claimed name is 403),
    else the name the page sent (loopback only). ``role`` names them in the errors."""
    if request.app.state.tokens is None:
        if claimed is None:
            raise HTTPException(422, f"{role} is required (no tokens configured: the page names its {role})")
        return claimed
    own = request.scope.get(AUDITOR_SCOPE_KEY)
    if own is None:  # the middleware lets only the page shell through without a token
        raise HTTPException(401, f"missing or unknown {role} token")
    if claimed is not None and claimed.strip() != own:
        raise HTTPException(403, f"this token belongs to {role} {own!r}; it cannot act as {claimed!r} "
                            f"(leave '{role}' out or send your own name)")
    return own
