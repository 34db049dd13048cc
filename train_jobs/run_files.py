"""What the relation train job's workers write to the run folder besides checkpoints, on any storage.

The run folder is ``(pyarrow filesystem, path)``: a local folder or one on an object store
(``relate.storage``), so ``progress.log`` and the fault drill work the same for ``run.storage_path``
``/shared/runs`` and ``s3://bucket/runs``. Ray-free: the caller passes rank and world size.
"""

from __future__ import annotations

import os
import signal
import time

__all__ = ["PROGRESS_LOG", "DRILL_MARKER", "ProgressLog", "maybe_kill"]

PROGRESS_LOG = "progress.log"
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
