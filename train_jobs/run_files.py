"""The relation train job's run folders: which one a run uses (a new, uniquely named one, or an
explicitly resumed one), and what the workers write there besides checkpoints, on any storage.

The run folder is ``(pyarrow filesystem, path)``: a local folder or one on an object store
(``relate.storage``), so ``progress.log`` and the fault drill work the same for ``run.storage_path``
``/shared/runs`` and ``s3://bucket/runs``. Ray-free: the caller passes rank and world size.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import time
from dataclasses import dataclass
from datetime import datetime, timezone

from relate.storage import join, redact, resolve

__all__ = ["PROGRESS_LOG", "TENSORBOARD_DIR", "DRILL_MARKER", "SNAPSHOT", "ProgressLog", "TensorBoardLog", "maybe_kill", "RunError", "RunState",
           "new_run_name", "latest_step", "latest_checkpoint_dir", "plan_run", "refuse_finished"]

PROGRESS_LOG = "progress.log"
TENSORBOARD_DIR = "tensorboard"  # rank 0's event files: ``tensorboard --logdir <run folder>``
SNAPSHOT = "checkpoint_manager_snapshot.json"  # Ray Train's record of a run's reported checkpoints
DRILL_MARKER = ".fault_drill_done"  # the fault drill's once-only marker, beside the checkpoint snapshot


def _read_text(fs, path: str) -> str | None:
    from pyarrow import fs as pafs

    if fs.get_file_info(path).type == pafs.FileType.NotFound:
        return None
    with fs.open_input_stream(path) as f:
        return f.read().decode()


def maybe_kill(kill_at: int | None, step: int, rank: int, world_size: int, run_dir) -> None:
    """Fault drill: the last rank kills its own process once, mid-epoch, at the configured step.

    It first waits until the controller has committed a checkpoint to storage (its snapshot file
    lists one), so the drill tests resumption rather than a race with checkpoint registration. The
    once-only marker sits beside the snapshot, on the run's storage (local or a URI).
    """
    if kill_at is None or step != kill_at:
        return
    fs, folder = run_dir
    marker = f"{folder}/{DRILL_MARKER}"
    if rank != world_size - 1 or _read_text(fs, marker) is not None:
        return
    snapshot = f"{folder}/checkpoint_manager_snapshot.json"
    deadline = time.time() + 300
    while time.time() < deadline and '"checkpoint_dir_name"' not in (_read_text(fs, snapshot) or ""):
        time.sleep(1.0)
    with fs.open_output_stream(marker) as f:
        f.write(str(time.time()).encode())
    os.kill(os.getpid(), signal.SIGKILL)


class ProgressLog:
    """Rank 0's step lines in ``<run folder>/progress.log``, readable by a driver that does not forward
    worker logs: appended on a local folder; an object store has no appends, so there the whole log
    (read back first after a restart) is rewritten at each line."""

    def __init__(self, run_dir) -> None:
        from pyarrow import fs as pafs

        self.fs, folder = run_dir
        self.path = f"{folder}/{PROGRESS_LOG}"
        self.local = isinstance(self.fs, pafs.LocalFileSystem)
        self.text = "" if self.local else (_read_text(self.fs, self.path) or "")

    def write(self, line: str) -> None:
        if self.local:
            with open(self.path, "a") as fh:
                fh.write(line + "\n")
            return
        self.text += line + "\n"
        with self.fs.open_output_stream(self.path) as f:
            f.write(self.text.encode())


class TensorBoardLog:
    """Rank 0's scalars as TensorBoard event files in ``<run folder>/tensorboard``.

    On a local (or shared) folder the writer writes there directly, flushed at each ``sync``; an
    object store takes no appends, so there the events go to a local folder whose files are copied
    up at each ``sync`` (every checkpoint, and the end). A resumed run purges the events an earlier
    attempt wrote past the step it resumes from, so a curve never doubles back.
    """

    def __init__(self, run_dir, resumed_from: int = 0) -> None:
        import tempfile

        from pyarrow import fs as pafs
        from torch.utils.tensorboard import SummaryWriter

        self.fs, folder = run_dir
        self.remote = f"{folder}/{TENSORBOARD_DIR}"
        self.local = isinstance(self.fs, pafs.LocalFileSystem)
        self.dir = self.remote if self.local else tempfile.mkdtemp(prefix="relate-tb-")
        # events of an earlier attempt at steps past the checkpoint resumed from are hidden (their steps repeat)
        self.writer = SummaryWriter(self.dir, purge_step=resumed_from + 1 if resumed_from else None, flush_secs=30)

    def scalars(self, metrics: dict, step: int) -> None:
        """Every finite number of ``metrics`` at ``step`` (tags as the metric names: loss/..., val/...)."""
        import math

        for k, v in metrics.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and k != "step":
                self.writer.add_scalar(k, float(v), step)

    def sync(self) -> None:
        self.writer.flush()
        if self.local:
            return
        self.fs.create_dir(self.remote, recursive=True)
        for name in os.listdir(self.dir):
            with open(os.path.join(self.dir, name), "rb") as src, self.fs.open_output_stream(f"{self.remote}/{name}") as dst:
                dst.write(src.read())

    def close(self) -> None:
        self.sync()
        self.writer.close()


class RunError(ValueError):
    """A run that cannot start as asked: its folder exists (and no resume), or there is nothing to resume."""


@dataclass
class RunState:
    """The run ``main`` trains: its folder name, where that is (printable), and for a resumed run
    the step and folder of the checkpoint it continues from."""

    name: str
    folder: str
    step: int | None = None
    checkpoint: str | None = None


def new_run_name(base: str, when: datetime | None = None, token: str | None = None) -> str:
    """``<base>-YYYYmmdd-HHMMSS-<6 hex>`` (UTC): sortable, and unique even for runs started the same second."""
    when = when or datetime.now(timezone.utc)
    return f"{base}-{when.astimezone(timezone.utc):%Y%m%d-%H%M%S}-{token or secrets.token_hex(3)}"


def _latest_checkpoint(storage: str, name: str) -> tuple[bool, dict | None]:
    """(the run folder exists, Ray Train's latest checkpoint record there: checkpoint_dir_name and metrics)."""
    from pyarrow import fs as pafs

    fs, root = resolve(storage)
    run_dir = f"{root.rstrip('/')}/{name}"
    if fs.get_file_info(run_dir).type == pafs.FileType.NotFound:
        return False, None
    text = _read_text(fs, f"{run_dir}/{SNAPSHOT}")
    return True, None if text is None else json.loads(text).get("latest_checkpoint_result")


def latest_checkpoint_dir(run_folder: str) -> str | None:
    """The folder of a run's latest checkpoint (a relation checkpoint folder), None when it has none."""
    parent, _, name = str(run_folder).rstrip("/").rpartition("/")
    _, latest = _latest_checkpoint(parent or ".", name)
    return None if latest is None else join(parent or ".", name, latest["checkpoint_dir_name"])


def latest_step(storage: str, name: str) -> int:
    """The step of the run's latest checkpoint (its reported ``step`` metric); 0 when it has none."""
    _, latest = _latest_checkpoint(storage, name)
    return int(((latest or {}).get("metrics") or {}).get("step", 0))


def plan_run(storage: str, name: str, resume: bool = False, unique: bool = True) -> RunState:
    """Which run folder under ``storage`` (absolute or a URI) a train invocation uses: a new one,
    ``<name>-<time>-<hex>`` when ``unique``, else ``name`` (an existing folder is an error naming it
    and --resume); or, with ``resume``, the folder ``name``, which must hold a checkpoint."""
    if resume:
        folder = redact(join(storage, name))
        exists, latest = _latest_checkpoint(storage, name)
        if latest is None:
            why = "it holds no checkpoint" if exists else "there is no such folder"
            raise RunError(f"cannot resume run {name!r}: {why} ({folder}). --resume takes the folder name of an "
                           f"earlier run under run.storage_path ({redact(storage)}), as printed when it started")
        step = int((latest.get("metrics") or {}).get("step", 0))
        return RunState(name, folder, step, redact(join(storage, name, latest["checkpoint_dir_name"])))
    name = new_run_name(name) if unique else name
    folder = redact(join(storage, name))
    exists, _ = _latest_checkpoint(storage, name)
    if exists:
        raise RunError(f"run folder {folder} already exists (an earlier run named {name!r}). Continue it with "
                       f"--resume {name} (run.resume=true), or start a new run: leave run.unique_name true (the "
                       f"default) for a folder of its own, or choose another run.name")
    return RunState(name, folder)


def refuse_finished(storage: str, name: str, total: int) -> None:
    """Resuming a run whose latest checkpoint is at its last step would restore it and return that
    checkpoint as if trained (Ray Train does): refused, saying so."""
    step = latest_step(storage, name)
    if step >= total:
        raise RunError(f"run {name!r} already finished: its latest checkpoint is at step {step} of {total}; nothing "
                       f"to resume (raise optim.max_steps to train it further, or start a new run without --resume)")
