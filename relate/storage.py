"""Storage locations that are a local path or a ``pyarrow.fs`` URI, read and written the same way.

A URI is whatever ``pyarrow.fs.FileSystem.from_uri`` resolves: ``s3://bucket/key``,
``gs://bucket/key``, ``file:///abs/path``, ``hdfs://host/path``. Everything a store needs beyond
the bucket travels in the URI, in pyarrow's own syntax, so one string reaches every process of a
Ray job (the driver, the Train controller and each worker) without extra settings:

- an S3-compatible endpoint (MinIO, Ceph, a test server):
  ``s3://bucket/runs?endpoint_override=host:9000&scheme=http``; ``region=...`` likewise;
- credentials: left out, each process uses the default chain (``AWS_ACCESS_KEY_ID`` /
  ``AWS_SECRET_ACCESS_KEY`` or ``AWS_PROFILE`` in its environment, an instance role); or inline as
  ``s3://KEY:SECRET@bucket/...``. Inline secrets are dropped from every location this project
  prints or returns (``redact``), so a reader of a printed URI needs the default chain.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

__all__ = ["is_uri", "resolve", "join", "redact", "uri_for"]

_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def is_uri(location: str | Path) -> bool:
    """True for ``scheme://...`` strings; a ``Path`` or a plain string path is local."""
    return isinstance(location, str) and bool(_URI.match(location))


def resolve(location: str | Path, filesystem=None):
    """``(pyarrow filesystem, path on it)`` for a local path or a URI; with ``filesystem`` given,
    ``location`` is already a path on it (what a Ray Train ``Checkpoint`` holds) and is kept."""
    from pyarrow import fs as pafs

    if filesystem is not None:
        return filesystem, str(location)
    if is_uri(location):
        return pafs.FileSystem.from_uri(location)
    return pafs.LocalFileSystem(), str(Path(location).expanduser().resolve())


def join(location: str, *parts: str) -> str:
    """``location`` with path parts appended: a URI keeps its scheme, bucket and query string."""
    rel = "/".join(p.strip("/") for p in parts if p.strip("/"))
    if not is_uri(location):
        return str(Path(location, rel)) if rel else location
    s = urlsplit(location)
    path = s.path.rstrip("/") + "/" + rel if rel else s.path
    return urlunsplit((s.scheme, s.netloc, path, s.query, s.fragment))


def redact(location: str) -> str:
    """A URI without inline credentials (``s3://KEY:SECRET@b/k`` -> ``s3://b/k``); paths as they are.
    A user part with no secret is kept: it names something (``abfss://container@account...``,
    ``gs://anonymous@bucket``)."""
    if not is_uri(location):
        return location
    s = urlsplit(location)
    user, at, host = s.netloc.rpartition("@")
    return urlunsplit((s.scheme, host if at and ":" in user else s.netloc, s.path, s.query, s.fragment))


def uri_for(storage: str, fs_path: str) -> str:
    """The URI of ``fs_path``, a path on the filesystem that the URI ``storage`` resolves to (e.g. a
    Ray Train checkpoint's ``path``), in ``storage``'s own form: scheme, endpoint and query kept,
    credentials dropped. A ``fs_path`` outside ``storage`` is an error."""
    _, root = resolve(storage)
    root, fs_path = root.rstrip("/"), fs_path.rstrip("/")
    if fs_path != root and not fs_path.startswith(root + "/"):
        raise ValueError(f"{fs_path!r} is not under the storage root {root!r} of {redact(storage)!r}")
    return redact(join(storage, fs_path[len(root):]))
