"""How much CPU Ray Data's split coordinator takes while a training stream is backpressured.

    python -m scripts.split_backpressure_cpu                # the object store budget unbounded
    python -m scripts.split_backpressure_cpu --budget-mb 20 # a budget the queued blocks fill
    python -m scripts.split_backpressure_cpu --budget-mb 20 --paced  # with the training stream's pacing

One consumer reads a 6,400-row stream (a map actor making 16-row blocks of 96 px float images) at a
training step's pace (0.4 s a batch) through ``streaming_split``, as Ray Train's dataset shard does,
and the split coordinator's CPU over a minute is read from /proc. When the map stage has run ahead
until the queued output fills the budget, its finished tasks' outputs wait unread, ``ray.wait`` in the
executor's loop returns at once, and the loop runs without sleeping: on this machine (Ray 2.60) 0.88
of a core against 0.016 unbounded. The training job's stream reaches that state whenever a run's
queued blocks outgrow the budget (a smaller object store, larger pictures); ``--paced`` adds what the
training stream has since (``train_jobs.stream_pacing``: a pause after each executor step that left
an output held back). No row may arrive twice, paced or not.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np


def _cpu_of(word: str) -> float:
    """CPU seconds so far of every process whose command line holds ``word``."""
    from benchmarks.annotate_overhead import _proc_table

    return sum(cpu for _, cmd, cpu in _proc_table().values() if word in cmd)


class _Images:
    def __call__(self, b):
        return {"row": b["row"], "x": np.random.rand(len(b["row"]), 3, 96, 96).astype(np.float32)}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--budget-mb", type=float, default=None, help="Ray Data's object store budget (default: Ray's)")
    ap.add_argument("--paced", action="store_true", help="the training stream's pacing (train_jobs.stream_pacing)")
    args = ap.parse_args(argv)
    import ray

    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False)
    ctx = ray.data.DataContext.get_current()
    if args.budget_mb is not None:
        limits = ctx.execution_options.resource_limits
        ctx.execution_options.resource_limits = limits.copy(object_store_memory=int(args.budget_mb * 2**20))
    ds = ray.data.from_items([{"row": i} for i in range(16 * 400)], override_num_blocks=50)
    ds = ds.map_batches(_Images, batch_size=16, compute=ray.data.ActorPoolStrategy(size=1), num_cpus=0.25)
    if args.paced:
        from train_jobs.stream_pacing import paced

        ds = paced(ds)
    (it,) = ds.streaming_split(1)
    n, t0, c0, rows = 0, 0.0, 0.0, []
    for batch in it.iter_batches(batch_size=16):
        rows.extend(batch["row"].tolist())
        n += 1
        if n == 20:  # after the start-up
            t0, c0 = time.time(), _cpu_of("SplitCoordinator")
        if n == 170:
            break
        time.sleep(0.4)
    if len(set(rows)) != len(rows):
        raise RuntimeError(f"the stream repeated rows: {len(rows)} read, {len(set(rows))} distinct")
    out = {"budget_mb": args.budget_mb, "paced": args.paced,
           "coordinator_cores": round((_cpu_of("SplitCoordinator") - c0) / (time.time() - t0), 4),
           "seconds": round(time.time() - t0, 1), "rows": len(rows)}
    print(out, flush=True)
    ray.shutdown()
    return out


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    main()
