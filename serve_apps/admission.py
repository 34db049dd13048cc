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
"""

from __future__ import annotations

import contextvars
from typing import Callable

from serve_apps.security import ApiError, error_response

__all__ = ["AdmissionMiddleware", "reserve_pixels", "ADMISSION"]

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
    """Hold ``pixels`` of this replica's ``budget`` until the current request ends (needs the
    middleware around the route; outside one, nothing is held)."""
    ticket = _TICKET.get()
    if ticket is None or pixels <= 0:
        return
    if pixels > budget:
        raise ApiError(413, "pixels_over_budget", f"{what}: {pixels} pixels exceed this server's in-flight budget of "
                                                  f"{budget} pixels")
    if ADMISSION["pixels"] + pixels > budget:
        held = ADMISSION["pixels"]
        raise ApiError(503, "pixels_busy", f"{what}: {pixels} pixels do not fit beside the {held} in flight "
                                           f"(budget {budget}), retry later",
                       headers={"Retry-After": "1"})
    ADMISSION["pixels"] += pixels
    ticket.append(pixels)
