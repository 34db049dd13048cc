"""A job's inputs, checked before it starts, and the one line a job's command prints for a bad one.

A job that reads what another command makes (a synthetic world, an annotated corpus, a trained
checkpoint, prepared benchmark files) checks it on the driver before any Ray work (a corpus:
``relate.data.corpus.require_corpus``). A missing one raises :class:`MissingInputError`, whose message says what is missing, where it was looked for
and the command that makes it. A job's command line (``relate.config.parse_job_args``, or
:func:`one_line_errors` for a command with its own parser) prints such an error, and a config
error, as one line on stderr (no traceback) and exits with status 1; every other error keeps its
traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["UserInputError", "MissingInputError", "MAKE_WORLD", "MAKE_CORPUS", "MAKE_CHECKPOINT", "MAKE_BENCHMARK",
           "is_remote", "require_path", "require_checkpoint", "one_line_errors", "user_error_line"]

# the commands that make each kind of input (``{path}`` becomes where the job looked)
MAKE_WORLD = "python -m pipelines.synthetic --set out_dir={path} (make demo builds runs/demo/synthetic)"
MAKE_CORPUS = ("python -m pipelines.annotate --config pipelines/configs/annotate_synthetic.yaml --set out_dir={path} "
               "(or a world: python -m pipelines.synthetic --set out_dir={path})")
MAKE_CHECKPOINT = ("make demo (its model: runs/demo/checkpoint) or python -m train_jobs.train_relation --config "
                   "train_jobs/configs/cpu_small.yaml")
MAKE_BENCHMARK = ("python -m eval_jobs.prepare synthetic --root runs/demo/synthetic --out runs/demo/prepared (the "
                  "synthetic suite; a real benchmark's files: python -m eval_jobs.prepare NAME --describe)")


class UserInputError(Exception):
    """An error in what the user gave a job (a config, an input path), reported in one line; a
    config error (``relate.config.ConfigError``) is one too."""


class MissingInputError(UserInputError, FileNotFoundError):
    """An input a job reads does not exist: what it is, where it was looked for, what makes it."""

    def __init__(self, what: str, path: str | Path, make: str) -> None:
        self.what, self.path, self.make = what, str(path), make
        super().__init__(f"{what} not found at {path}; make it with: {make}")

    def __reduce__(self):
        # raised in a Ray worker, it crosses to the driver pickled; by default pickle calls the class with
        # the message alone, and Ray's controller then reported a TypeError about __init__ instead
        return type(self), (self.what, self.path, self.make)


def is_remote(path: str | Path) -> bool:
    """A URI (``s3://...``): its job's own reader checks it, not these local checks."""
    return "://" in str(path)


def require_path(path: str | Path, what: str, make: str) -> None:
    """A local file or folder must exist (a URI is left to the job's own reader)."""
    if not is_remote(path) and not Path(path).exists():
        raise MissingInputError(what, path, make.replace("{path}", str(path)))


def require_checkpoint(path: str | Path, what: str = "relation checkpoint", make: str = MAKE_CHECKPOINT) -> None:
    """A checkpoint folder (or a pointer file naming one, as a training run's LATEST) must exist."""
    require_path(path, what, make)


def user_error_line(exc: BaseException) -> str | None:
    """The one line a job's command prints for ``exc``, or None when it is not a user's error (its
    traceback is then printed as usual). An error a Ray task raised counts by its cause."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException) and not isinstance(exc, UserInputError):
        exc = cause
    if not isinstance(exc, UserInputError):
        return None
    line = ""
    for part in filter(None, (p.strip() for p in str(exc).splitlines())):
        line += part if not line else (" " if line.endswith(":") else "; ") + part
    return line


def one_line_errors(prog: str) -> None:
    """From now on, a missing input or a config error ending this process prints as
    ``<prog>: error: <one line>``, no traceback (for a job's ``__main__``). The process then ends as
    after any uncaught error: status 1, exit handlers run (a local Ray instance is shut down)."""
    previous = sys.excepthook
    if getattr(previous, "one_line_errors", False):  # installed already (a job parses its arguments once)
        return

    def hook(kind, exc, tb):
        line = user_error_line(exc)
        if line is None:
            previous(kind, exc, tb)
            return
        sys.stdout.flush()
        print(f"{prog}: error: {line}", file=sys.stderr, flush=True)

    hook.one_line_errors = True
    sys.excepthook = hook
