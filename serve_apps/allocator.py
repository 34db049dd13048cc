"""Keep glibc's allocator from holding on to the memory of large requests in a replica process.

A replica decodes, copies and scores images of up to tens of MB in worker threads
(``asyncio.to_thread``, Serve's batch thread). Under glibc's defaults each of those threads may
get its own malloc arena (up to 8 per core), and the mmap threshold rises to 32 MB after the first
large free, so later arrays of up to 32 MB land in arenas and their pages stay in the process
after the request ends: resident memory then grows with each kind of large request instead of
returning to its resting size (benchmarks/serve_overload, ``peak_rss_mb_16_worst``).
:func:`bound_malloc_retention` fixes the threshold (a buffer of 1 MB or more is its own mapping,
returned to the system when freed) and caps the arenas, once per replica process, in each
deployment's constructor.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

__all__ = ["bound_malloc_retention", "MMAP_THRESHOLD_BYTES", "ARENA_MAX"]

MMAP_THRESHOLD_BYTES = 1 << 20  # an image row block or a mask is far larger; a request's small objects far smaller
ARENA_MAX = 2
# mallopt parameters (glibc's malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD, _M_ARENA_MAX = -1, -3, -8
_log = logging.getLogger(__name__)


def bound_malloc_retention(mmap_threshold_bytes: int = MMAP_THRESHOLD_BYTES, arena_max: int = ARENA_MAX) -> bool:
    """Set glibc's mmap threshold (fixed, no longer raised by frees), trim threshold and arena cap for
    this process; True when applied. On a C library without ``mallopt`` (musl, macOS) nothing
    changes, and the log says so."""
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:
        _log.warning("no mallopt in the C library (%s): a replica keeps glibc-free allocator defaults", name)
        return False
    ok = all(mallopt(param, value) == 1 for param, value in ((_M_MMAP_THRESHOLD, mmap_threshold_bytes),
                                                             (_M_TRIM_THRESHOLD, 2 * mmap_threshold_bytes),
                                                             (_M_ARENA_MAX, arena_max)))
    if not ok:
        _log.warning("mallopt refused a setting (threshold %d B, %d arenas)", mmap_threshold_bytes, arena_max)
    return ok
