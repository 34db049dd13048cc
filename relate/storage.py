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

One root for job outputs: ``RELATE_ROOT`` (an absolute path on storage every node mounts, e.g.
``/mnt/shared/relate``, or a URI) is where every run-data path a config leaves relative lands
(``runs/annotated`` -> ``$RELATE_ROOT/runs/annotated``); config fields typed :data:`Location` are
resolved this way when the config is validated, absolute paths and URIs pass unchanged. Without
the root, a relative path means the current directory, as on a laptop, except inside a job
started by ``ray job submit``: there the current directory is Ray's temporary copy of the
working tree (``.../_ray_pkg_<hash>``), which the next job (or the next upload of changed code)
does not see, so a relative path is refused with a message saying what to set.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit, urlunsplit

from pydantic import AfterValidator, Field

__all__ = ["is_uri", "resolve", "join", "redact", "uri_for", "ROOT_ENV", "storage_root", "in_submitted_job",
           "under_root", "Location", "LocationValue", "RelativePathError"]

ROOT_ENV = "RELATE_ROOT"
# set by Ray's job supervisor in the environment of a submitted job's entrypoint (the driver)
_JOB_CONFIG_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"
_RAY_PKG = "_ray_pkg_"  # the folder name of a runtime_env working_dir package on a node

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


class RelativePathError(ValueError):
    """A relative run-data path inside a submitted Ray job with no ``RELATE_ROOT`` set."""


def storage_root() -> str | None:
    """``$RELATE_ROOT`` (expanded), or None when unset or empty. A relative root is an error: it
    would itself depend on the current directory."""
    raw = os.environ.get(ROOT_ENV, "").strip()
    if not raw:
        return None
    if is_uri(raw):
        return raw.rstrip("/")
    root = Path(raw).expanduser()
    if not root.is_absolute():
        raise RelativePathError(f"{ROOT_ENV}={raw!r} must be an absolute path or a URI (s3://..., gs://...)")
    return str(root)


def in_submitted_job(cwd: str | Path | None = None, environ=None) -> str | None:
    """Why this process runs in a job started by ``ray job submit`` (a short reason), else None:
    the driver carries Ray's job config with a submission id, and any process of a job whose
    runtime_env has a ``working_dir`` runs inside a ``_ray_pkg_<hash>`` copy of it."""
    env = os.environ if environ is None else environ
    raw = env.get(_JOB_CONFIG_ENV)
    if raw:
        try:
            meta = (json.loads(raw) or {}).get("metadata") or {}
        except (ValueError, AttributeError):
            meta = {}
        if meta.get("job_submission_id"):
            return f"submitted job {meta['job_submission_id']}"
    here = Path(os.getcwd() if cwd is None else cwd)
    pkg = next((part for part in here.parts if part.startswith(_RAY_PKG)), None)
    if pkg:
        return f"the working directory is Ray's copy of the uploaded working_dir ({pkg})"
    return None


def under_root(location: str | Path, what: str = "path") -> str:
    """Where a run-data location lives: a URI or an absolute path as is (``~`` expanded); a relative
    path under ``$RELATE_ROOT`` when set; else relative to the current directory, which inside a
    submitted Ray job is refused (:class:`RelativePathError`, naming ``what`` and what to set)."""
    loc = str(location).strip()
    if not loc or is_uri(loc):
        return loc
    path = Path(loc).expanduser()
    if path.is_absolute():
        return str(path)
    root = storage_root()
    if root is not None:
        return join(root, loc)
    reason = in_submitted_job()
    if reason:
        raise RelativePathError(
            f"{what} {loc!r} is relative and {ROOT_ENV} is not set, but this process runs inside a Ray job "
            f"({reason}): the path would land in {os.getcwd()}, Ray's temporary copy of the working tree, which "
            f"later jobs do not see. Set {ROOT_ENV} to shared storage in the job's runtime_env "
            f"(env_vars: {{{ROOT_ENV}: /mnt/shared/relate}}, or `python -m scripts.submit_job --root ...`), "
            f"or give an absolute path or a URI (s3://bucket/...).")
    return loc


def _validate_location(value: str) -> str:
    return under_root(value, what="run-data path")


# A config field holding run data (a job's input or output folder, a checkpoint, a predictions
# file): resolved by :func:`under_root` when the config is validated, its default included.
# ``LocationValue`` is the same check for a member of a union or a container
# (``LocationValue | None``, ``dict[str, LocationValue]``), where a default is not validated.
LocationValue = Annotated[str, AfterValidator(_validate_location)]
Location = Annotated[str, AfterValidator(_validate_location), Field(validate_default=True)]
