"""Names, submission metadata and progress lines that make a job legible on the Ray dashboard.

Every job's ``main()`` derives one run name from its config (:func:`run_name`, e.g.
``annotate-annotated`` for ``out_dir=/mnt/shared/annotated``) and hands it to Ray wherever Ray
takes one: the Ray Data dataset name (Data dashboard, metric tags), Ray Train's ``RunConfig(name=)``
and task names (``.options(name=...)``, the Tasks and Timeline views). ``scripts/submit_job.py``
turns the same name into a ``ray job submit`` submission id (name plus a UTC timestamp) and
attaches :func:`job_metadata` (job, config, overrides, git commit, user), which the Jobs page
shows and ``JobSubmissionClient.get_job_info(id).metadata`` returns.

Long loops report ``done/total`` with elapsed time and ETA through :class:`Progress`; the lines go
to the driver's stdout, i.e. into the job log the dashboard and ``ray job logs -f`` show.

No ray import here (relate/ stays Ray-free).
"""

from __future__ import annotations

import getpass
import re
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

__all__ = ["run_name", "config_label", "submission_id", "git_commit", "job_metadata", "format_seconds",
           "eta_seconds", "Progress", "gather"]

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
MAX_NAME = 64  # Ray accepts longer ids; the dashboard's tables do not show them whole


def _slug(text: str) -> str:
    return _UNSAFE.sub("-", text).strip("-.")


def run_name(job: str, label: str | None = None) -> str:
    """``job`` plus the last path component of ``label`` (a folder, URI or plain name), slugged.

    ``run_name("annotate", "/mnt/shared/annotated/")`` is ``annotate-annotated``;
    ``run_name("train", "s3://bucket/runs/released")`` is ``train-released``.
    """
    if not _slug(job):
        raise ValueError(f"job name {job!r} has no usable characters")
    tail = _slug(str(label).rstrip("/").rsplit("/", 1)[-1]) if label else ""
    name = f"{_slug(job)}-{tail}" if tail and tail != _slug(job) else _slug(job)
    return name[:MAX_NAME].rstrip("-.")


def config_label(cfg: Any) -> str | None:
    """The part of a job config that names its run: ``run.name``, else ``out_dir`` / ``output_dir``."""
    run = getattr(cfg, "run", None)
    for value in (getattr(run, "name", None), getattr(cfg, "out_dir", None), getattr(cfg, "output_dir", None)):
        if isinstance(value, str) and value:
            return value
    return None


def submission_id(name: str, when: datetime | None = None) -> str:
    """``<name>-YYYYmmdd-HHMMSS`` (UTC): unique per submission, sortable, readable on the Jobs page."""
    when = when or datetime.now(timezone.utc)
    return f"{name}-{when.astimezone(timezone.utc):%Y%m%d-%H%M%S}"


def git_commit(repo: str | Path = ".") -> str | None:
    """Short commit of ``repo`` with ``+dirty`` when what a job uploads differs from it: a tracked
    file changed, or an untracked file that git does not ignore (Ray's working_dir upload skips
    what .gitignore lists and takes the rest). None outside a git checkout."""
    try:
        head = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=all"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return head.stdout.strip() + ("+dirty" if dirty else "")


def job_metadata(job: str, config: str | None = None, overrides: Sequence[str] = (), repo: str | Path = ".",
                 user: str | None = None, **extra: str) -> dict[str, str]:
    """Metadata for ``ray job submit --metadata-json`` / ``submit_job(metadata=...)``: strings only (Ray's rule)."""
    meta = {"project": "relate", "job": job, "config": config or "", "overrides": " ".join(overrides),
            "git_commit": git_commit(repo) or "unknown", "user": user or _user()}
    bad = {k: v for k, v in extra.items() if not isinstance(v, str)}
    if bad:
        raise TypeError(f"job metadata values must be strings, got {bad}")
    return {**meta, **extra}


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (containers)
        return "unknown"


def format_seconds(seconds: float | None) -> str:
    """``75.0`` -> ``1m15s``; ``None`` -> ``?``."""
    if seconds is None:
        return "?"
    s = int(round(max(0.0, seconds)))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


def eta_seconds(done: int, total: int, elapsed: float) -> float | None:
    """Remaining time at the mean rate so far; None before the first unit is done."""
    if done <= 0:
        return None
    return max(0.0, elapsed / done * (total - done))


class Progress:
    """``done/total`` counter that emits one line per update, e.g.

    ``[annotate-annotated] shards 3/9 (33%) elapsed 12s eta 24s``

    ``min_interval_s`` throttles the lines (the last unit always prints); ``emit`` defaults to
    ``print(..., flush=True)`` so the line reaches the job log at once.
    """

    def __init__(self, name: str, unit: str, total: int, min_interval_s: float = 0.0,
                 emit: Callable[[str], None] | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        if total < 0:
            raise ValueError(f"Progress {name}/{unit}: total={total} must be >= 0")
        self.name, self.unit, self.total = name, unit, total
        self.done = 0
        self.min_interval_s = min_interval_s
        self._emit = emit or (lambda line: print(line, flush=True))
        self._clock = clock
        self._t0 = clock()
        self._last: float | None = None

    def line(self) -> str:
        elapsed = self._clock() - self._t0
        pct = 100.0 * self.done / self.total if self.total else 100.0
        return (f"[{self.name}] {self.unit} {self.done}/{self.total} ({pct:.0f}%) "
                f"elapsed {format_seconds(elapsed)} eta {format_seconds(eta_seconds(self.done, self.total, elapsed))}")

    def update(self, n: int = 1) -> str | None:
        """Count ``n`` more units done; returns the line when one was emitted."""
        self.done += n
        if self.done > self.total:
            raise ValueError(f"Progress {self.name}/{self.unit}: {self.done} done of {self.total}")
        now = self._clock()
        if self.done < self.total and self._last is not None and now - self._last < self.min_interval_s:
            return None
        self._last = now
        text = self.line()
        self._emit(text)
        return text


def gather(ray: Any, refs: list, progress: Progress) -> list:
    """``ray.get(refs)`` in order, counting each task on ``progress`` as it finishes (``ray.wait`` loop).

    ``ray`` is the module, passed in by the caller: relate/ never imports it.
    """
    pending = list(refs)
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        progress.update(len(ready))
    return ray.get(refs)
