"""One authentication rule for every HTTP surface we ship (the relate app, the judge's
OpenAI-compatible app behind the same Serve proxy, the audit page).

The rule:
* a bearer token comes from the config, an environment variable or a file (never logged);
* a bind address that is not loopback needs a token: without one the server refuses to start;
* without a token (loopback only) a browser page could still reach the server through a DNS name
  its attacker points at 127.0.0.1 (DNS rebinding), so only known Host names are answered
  (:func:`allowed_host_names`, :class:`HostCheckMiddleware`);
* when a token is configured, every route answers 401 without it (health and docs included),
  compared in constant time. Only Serve's own proxy probes (``/-/healthz``, ``/-/routes``), which
  carry no data, stay open so a load balancer or KubeRay can probe the node, and the static files
  of the "try it" page (``PAGE_SUFFIXES``, GET only: HTML, JS and CSS with no data in them), which
  a browser must load before it can ask for the token; every call the page makes needs it.

``BearerAuthMiddleware`` is plain ASGI, so the same class guards each FastAPI app itself (relate,
the ``ray.serve.llm`` judge app in :mod:`serve_apps.deployments.judge_llm`, audit), and can also
guard the Serve HTTP proxy (:func:`proxy_middlewares`, installed on every node with
``RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH=serve_apps.auth:proxy_middlewares``) as a second line
that covers any app on the proxy; no app relies on that second line.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import os
from pathlib import Path
from typing import Awaitable, Callable, Iterable

__all__ = ["TOKEN_ENV", "TOKEN_FILE_ENV", "PROXY_CALLBACK", "PAGE_SUFFIXES", "AuthConfigError", "is_loopback",
           "read_token", "require_token_for_bind", "serve_bind_host", "token_matches", "BearerAuthMiddleware",
           "LOOPBACK_HOST_NAMES", "allowed_host_names", "request_host", "HostCheckMiddleware", "proxy_middlewares"]

TOKEN_ENV = "RELATE_API_TOKEN"             # default variable holding the token on every node
TOKEN_FILE_ENV = "RELATE_API_TOKEN_FILE"   # or a file (a Kubernetes secret mount) holding it
PROXY_CALLBACK = "serve_apps.auth:proxy_middlewares"
PROBE_PATHS = frozenset({"/-/healthz", "/-/routes"})  # Serve's proxy probes: no data, no model
# the relate app's static page under any route prefix (serve_apps/static/ui): GET and HEAD only
PAGE_SUFFIXES = ("/ui/relate.html", "/ui/relate.js", "/ui/relate.css")
_MIN_TOKEN_CHARS = 16
LOOPBACK_HOST_NAMES = ("127.0.0.1", "localhost", "::1")


class AuthConfigError(ValueError):
    """The server would start unguarded, or its token cannot be read."""


def is_loopback(host: str) -> bool:
    """True when ``host`` binds only this machine (127.0.0.0/8, ::1, 'localhost')."""
    h = host.strip().strip("[]").lower()
    if h == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:  # a hostname other than localhost may resolve anywhere
        return False


def read_token(token: str | None = None, env: str | None = None, file: str | None = None) -> str | None:
    """The configured token (at most one source), or None. A source named but empty is an error."""
    given = [name for name, v in (("token", token), ("env", env), ("file", file)) if v]
    if len(given) > 1:
        raise AuthConfigError(f"give one token source, not {' and '.join(given)}")
    if token:
        value, where = token, "the inline token"
    elif env:
        value, where = os.environ.get(env, ""), f"environment variable {env}"
        if not value:
            raise AuthConfigError(f"{where} is named as the token source but is empty or unset")
    elif file:
        path = Path(file)
        if not path.is_file():
            raise AuthConfigError(f"token file {file} does not exist")
        value, where = path.read_text().strip(), f"token file {file}"
        if not value:
            raise AuthConfigError(f"{where} is empty")
    else:
        return None
    value = value.strip()
    if len(value) < _MIN_TOKEN_CHARS or not value.isprintable() or " " in value:
        raise AuthConfigError(f"{where}: a token must be at least {_MIN_TOKEN_CHARS} printable characters "
                              "without spaces")
    return value


def require_token_for_bind(host: str, token: str | None, surface: str) -> None:
    """Refuse to start ``surface`` on a non-loopback ``host`` without a token."""
    if token is None and not is_loopback(host):
        raise AuthConfigError(
            f"{surface} would listen on {host!r}, beyond this machine, with no bearer token: set "
            f"{TOKEN_ENV} (or {TOKEN_FILE_ENV}, or the config's token source), or bind 127.0.0.1")


def token_matches(header: str | None, token: str) -> bool:
    """Constant-time check of an ``Authorization: Bearer <token>`` header value."""
    scheme, _, value = (header or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(), token.encode())


def _header(scope: dict, name: bytes) -> str | None:
    for k, v in scope.get("headers") or ():
        if k.lower() == name:
            return v.decode("latin-1")
    return None


class BearerAuthMiddleware:
    """ASGI: 401 (JSON ``{error, message}``) for any HTTP request without the bearer token.

    ``token`` is the token itself or a callable returning it (None: no token configured, every
    request passes; only allowed on loopback, which the start-up check enforces). ``open_paths``
    pass whatever the method; a GET or HEAD whose path ends with one of ``open_suffixes`` passes
    too (static files mounted under a route prefix)."""

    def __init__(self, app, token: str | None | Callable[[], str | None],
                 open_paths: Iterable[str] = PROBE_PATHS, open_suffixes: tuple[str, ...] = ()) -> None:
        self.app, self._token, self.open_paths = app, token, frozenset(open_paths)
        self.open_suffixes = tuple(open_suffixes)

    def _open(self, scope: dict) -> bool:
        path = scope.get("path") or ""
        if path in self.open_paths:
            return True
        return bool(self.open_suffixes) and scope.get("method") in ("GET", "HEAD") and path.endswith(self.open_suffixes)

    @property
    def token(self) -> str | None:
        return self._token() if callable(self._token) else self._token

    async def __call__(self, scope, receive, send) -> Awaitable[None] | None:
        token = self.token
        if scope["type"] not in ("http", "websocket") or token is None or self._open(scope):
            return await self.app(scope, receive, send)
        if token_matches(_header(scope, b"authorization"), token):
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":
            return await send({"type": "websocket.close", "code": 1008})
        body = json.dumps({"error": "unauthorized", "message": "missing or wrong bearer token "
                           "(send 'Authorization: Bearer <token>')"}).encode()
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"www-authenticate", b'Bearer realm="relate"')]})
        await send({"type": "http.response.body", "body": body})


def allowed_host_names(bind_host: str, extra: Iterable[str] = ()) -> list[str]:
    """Host header values a server without a token answers to: loopback names, the bind address
    and ``extra``, lower case, IPv6 literals in brackets (as a Host header writes them).

    Anything else is refused, so a DNS name an attacker points at 127.0.0.1 (DNS rebinding) cannot
    make a local browser talk to the server on the attacker's behalf."""
    names = dict.fromkeys([*LOOPBACK_HOST_NAMES, bind_host, *extra])
    return [f"[{h}]" if ":" in h and not h.startswith("[") else h.lower() for h in names if h]


def request_host(header: str | None) -> str:
    """The host part of a Host header, lower case: '127.0.0.1:8000' -> '127.0.0.1', '[::1]:80' -> '[::1]'."""
    value = (header or "").strip().lower()
    if value.startswith("["):
        return value[:value.find("]") + 1] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class HostCheckMiddleware:
    """ASGI: a JSON 421 for any HTTP request whose Host header is not an allowed name.

    ``allowed`` is the list or a callable returning it (None: no check, as when a token guards the
    server instead and a rebinding page cannot know it)."""

    def __init__(self, app, allowed: Iterable[str] | None | Callable[[], Iterable[str] | None]) -> None:
        self.app, self._allowed = app, allowed

    async def __call__(self, scope, receive, send) -> None:
        allowed = self._allowed() if callable(self._allowed) else self._allowed
        if scope["type"] not in ("http", "websocket") or allowed is None:
            return await self.app(scope, receive, send)
        host = request_host(_header(scope, b"host"))
        if host in allowed:
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":
            return await send({"type": "websocket.close", "code": 1008})
        body = json.dumps({"error": "unknown_host", "message": f"Host {host[:100]!r} is not served here (without a "
                           f"token only {', '.join(allowed)} are answered)"}).encode()
        await send({"type": "http.response.start", "status": 421,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


def serve_bind_host() -> str:
    """The Serve proxy's real bind address, from the controller (the YAML's ``http_options.host``)."""
    import ray
    from ray.serve._private.constants import SERVE_CONTROLLER_NAME, SERVE_NAMESPACE

    controller = ray.get_actor(SERVE_CONTROLLER_NAME, namespace=SERVE_NAMESPACE)
    return ray.get(controller.get_http_config.remote(), timeout=30).host


def proxy_middlewares() -> list:
    """Serve proxy callback: the token middleware for every app on the proxy, and Serve's own
    plain-text errors (backpressure 503, proxy timeout 408) as the API's JSON
    (:class:`serve_apps.proxy_errors.ServeErrorJsonMiddleware`, inside the token check).

    Reads the token from ``RELATE_API_TOKEN`` or ``RELATE_API_TOKEN_FILE`` on the node and
    refuses (the proxy does not start, the error names what to set) when the proxy binds
    beyond loopback without one."""
    from starlette.middleware import Middleware

    from serve_apps.proxy_errors import ServeErrorJsonMiddleware

    token = read_token(env=TOKEN_ENV if os.environ.get(TOKEN_ENV) else None,
                       file=os.environ.get(TOKEN_FILE_ENV) or None)
    require_token_for_bind(serve_bind_host(), token, "the Serve HTTP proxy")
    # Serve wraps in list order, so the last is outermost: a request without the token is refused first
    return [Middleware(ServeErrorJsonMiddleware),
            Middleware(BearerAuthMiddleware, token=token, open_suffixes=PAGE_SUFFIXES)]
