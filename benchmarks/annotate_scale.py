"""Annotation at corpus scale, simulated: does the job's cost per image and its driver's memory
stay flat from 2,000 to 20,000 (quick) and 200,000 records (full run)?

Each size runs ``pipelines.annotate.main`` with the scripted annotator on a fresh local Ray
instance in a fresh process (so no size inherits another's heap or workers). The records repeat
a pool of small synthetic scenes under distinct image ids (every record is still read, decoded,
marked, annotated, gated and written on its own), so that building 200k records stays cheap.
A sampler thread in that process reads, every 0.5 s, the driver's RSS, the RSS of every Ray
worker process (psutil over the driver's descendants), the CPU time of all of them, and, every
second, the object store's used bytes (the raylet's store statistics). Figures, per size
(``2k``, ``20k``, ``200k``):

* ``wall_s_per_image_<n>``: the job's wall time / records;
* ``cpu_s_per_image_<n>``: CPU time (user + system) of the driver (less the sampler), the Ray
  workers and Ray's daemons during the job / records; the cost that wall time hides on a shared,
  loaded machine;
* ``driver_rss_peak_mb_<n>`` (and ``driver_rss_start_mb_<n>``, before the job;
  ``driver_rss_anon_peak_mb_<n>``, its private part, without the object store pages it mapped);
  the largest worker's peak RSS ``worker_rss_peak_mb_<n>`` (its process title
  ``worker_rss_peak_process_<n>``), the peak of all workers' RSS together
  ``workers_rss_sum_peak_mb_<n>``; the object store's peak ``object_store_peak_mb_<n>``;

and the ratios ``cost_ratio_20k_over_2k`` (CPU per image), ``wall_ratio_20k_over_2k`` and
``driver_rss_ratio_20k_over_2k`` (peak driver RSS), plus the ``200k`` ones in the full run. A
flat job keeps each ratio near 1 (goal: at most 1.1). ``--sizes 200 1000`` measures other sizes
(labelled as counted: ``0.2k``, ``1k``), for a smoke run. Linux only (``/proc`` through psutil).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from benchmarks._common import run_benchmark

N_SCENES = 100
QUICK_SIZES, FULL_SIZES = (2_000, 20_000), (2_000, 20_000, 200_000)
_MB = 1024 * 1024


def _label(n: int) -> str:
    return f"{n // 1000}k" if n % 1000 == 0 else f"{n / 1000:g}k"


def _pool(root: Path):
    """N_SCENES small synthetic scenes written as PNGs; their records as one Arrow table."""
    from PIL import Image

    from relate.data.synthetic import SyntheticConfig, make_scene
    from relate.schema import CORPUS_SCHEMA, to_table

    (root / "images").mkdir(parents=True)
    world = SyntheticConfig(seed=1, min_size=96, max_size=128, max_objects=8)
    rows = []
    for i in range(N_SCENES):
        s = make_scene(i, world)
        uri = root / "images" / f"{s.image_id}.png"
        Image.fromarray(s.image).save(uri)
        rows.append(s.to_record(str(uri), "train"))
    return to_table(rows, CORPUS_SCHEMA)


def _input(root: Path, pool, n: int) -> Path:
    """A run folder of ``n`` records: the pool repeated, each copy under its own image id."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    t = pool.take(pa.array(np.arange(n) % pool.num_rows))
    base = t.column("image_id").to_pylist()
    ids = pa.array([f"{b}-{k // pool.num_rows:06d}" for k, b in enumerate(base)], pa.string())
    t = t.set_column(t.schema.get_field_index("image_id"), "image_id", ids)
    (root / "corpus" / "train").mkdir(parents=True)
    pq.write_table(t, root / "corpus" / "train" / "part-0.parquet")
    return root


def _rss_anon(pid: int) -> int:
    """Private resident memory of a process in bytes (``RssAnon`` of /proc/PID/status)."""
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


def _is_worker(cmd: list[str]) -> bool:
    """A Ray worker process (task or actor), not one of Ray's daemons or agents."""
    joined = " ".join(cmd)
    return (joined.startswith("ray::") or "default_worker.py" in joined) and "Agent" not in joined


class _Sampler:
    """Memory and CPU of the driver and everything it started, sampled on a thread."""

    def __init__(self, period_s: float = 0.5) -> None:
        import ray  # noqa: F401  (Ray ships psutil in ray/thirdparty_files and puts it on sys.path on import)
        import psutil

        self.me = psutil.Process()
        self.period_s = period_s
        self.driver_rss: list[int] = []
        self.driver_anon: list[int] = []  # private pages only: RSS less file-backed and shared (object store) pages
        self.workers_rss_sum: list[int] = []
        self.worker_rss_max: list[int] = []
        self.worker_peak = (0, "")  # (RSS, process title) of the largest worker seen: which stage holds the memory
        self.store_used: list[int] = []
        self.n_workers = 0
        self.first_cpu: dict[int, float] = {}  # CPU at the start; 0 for processes started during the job
        self.last_cpu: dict[int, float] = {}
        self.own_cpu = 0.0
        self._started = False
        self._store = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _store_bytes(self) -> int:
        # Ray's own store statistics (what `ray memory --stats-only` prints); internal API, no public one reads them
        from ray._private import internal_api

        if self._store is None:
            import ray

            self._store = internal_api.get_state_from_address(ray.get_runtime_context().gcs_address)
        return int(internal_api.get_memory_info_reply(self._store, timeout_seconds=10).store_stats.object_store_bytes_used)

    def sample(self, store: bool) -> None:
        import psutil

        t0 = time.thread_time()
        self.driver_rss.append(self.me.memory_info().rss)
        self.driver_anon.append(_rss_anon(self.me.pid))
        rss, workers = [], set()
        for p in self.me.children(recursive=True):
            try:
                with p.oneshot():
                    cpu = sum(p.cpu_times()[:2])
                    cmd = p.cmdline()
                    if _is_worker(cmd):
                        rss.append(p.memory_info().rss)
                        workers.add(p.pid)
                        self.worker_peak = max(self.worker_peak, (rss[-1], " ".join(" ".join(cmd).split())[:60]))
            except psutil.Error:  # exited meanwhile: its last sample stands
                continue
            self.first_cpu.setdefault(p.pid, cpu if not self._started else 0.0)
            self.last_cpu[p.pid] = cpu
        self.workers_rss_sum.append(sum(rss))
        self.worker_rss_max.append(max(rss, default=0))
        self.n_workers = max(self.n_workers, len(workers))
        if store:
            self.store_used.append(self._store_bytes())
        self.own_cpu += time.thread_time() - t0

    def _loop(self) -> None:
        k = 0
        while not self._stop.wait(self.period_s):
            k += 1
            self.sample(store=k % 2 == 0)

    def start(self) -> None:
        self.sample(store=True)
        self.driver_rss_start = self.driver_rss[-1]
        self._started = True
        self._thread.start()

    def stop(self) -> float:
        """Stop sampling; returns the CPU seconds the driver's descendants used since start."""
        self._stop.set()
        self._thread.join()
        self.sample(store=True)
        return sum(cpu - self.first_cpu[pid] for pid, cpu in self.last_cpu.items())


def _one_size(input_dir: str, out_dir: str, n: int, log: str) -> dict[str, float]:
    """One job of ``n`` records on a fresh Ray instance, in a process of its own."""
    import ray

    from pipelines.annotate import AnnotateConfig, lean_driver, main

    lean_driver()  # as `python -m pipelines.annotate` sets up its driver
    with open(log, "w") as fh, contextlib.redirect_stdout(fh):  # thousands of progress lines: kept out of the JSON
        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False, configure_logging=False)
        try:
            ray.data.DataContext.get_current().enable_progress_bars = False
            cfg = AnnotateConfig(input_dir=input_dir, out_dir=out_dir, splits=["train"], duplicate_person_rate=0.1)
            time.sleep(2.0)  # the idle workers Ray starts with finish importing before the clock starts
            sampler = _Sampler()
            sampler.start()
            c0, t0 = time.process_time(), time.perf_counter()
            res = main(cfg)
            wall = time.perf_counter() - t0
            driver_cpu = time.process_time() - c0
            others_cpu = sampler.stop()
            driver_cpu -= sampler.own_cpu
        finally:
            ray.shutdown()
    if not (res.complete and res.stats["images"] == n):
        raise RuntimeError(f"the {n}-record run must annotate every image; its log ends:\n" + Path(log).read_text()[-3000:])
    x = _label(n)
    return {f"wall_s_per_image_{x}": round(wall / n, 6), f"cpu_s_per_image_{x}": round((driver_cpu + others_cpu) / n, 6),
            f"driver_cpu_s_per_image_{x}": round(driver_cpu / n, 6), f"wall_s_{x}": round(wall, 1),
            f"driver_rss_start_mb_{x}": round(sampler.driver_rss_start / _MB, 1),
            f"driver_rss_peak_mb_{x}": round(max(sampler.driver_rss) / _MB, 1),
            f"driver_rss_anon_peak_mb_{x}": round(max(sampler.driver_anon) / _MB, 1),
            f"worker_rss_peak_mb_{x}": round(max(sampler.worker_rss_max) / _MB, 1),
            f"worker_rss_peak_process_{x}": sampler.worker_peak[1],
            f"workers_rss_sum_peak_mb_{x}": round(max(sampler.workers_rss_sum) / _MB, 1),
            f"object_store_peak_mb_{x}": round(max(sampler.store_used) / _MB, 1),
            f"ray_worker_processes_{x}": sampler.n_workers, f"samples_{x}": len(sampler.driver_rss),
            f"load_average_1m_{x}": round(os.getloadavg()[0], 2)}


def measure(quick: bool, sizes: tuple[int, ...] | None = None) -> dict[str, float]:
    """Every size's figures and each larger size's ratios over the first; ``sizes`` replaces the
    quick or full sizes (``--sizes 200 1000``: a smoke run of the whole benchmark in seconds)."""
    sizes = sizes or (QUICK_SIZES if quick else FULL_SIZES)
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        pool = _pool(root / "pool")
        for n in sizes:
            inp = _input(root / f"in-{n}", pool, n)
            # a fresh interpreter per size: the driver's heap and Ray's workers start equal for each
            with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as ex:
                figures.update(ex.submit(_one_size, str(inp), str(root / f"out-{n}"), n, str(root / f"log-{n}.txt")).result())
            shutil.rmtree(root / f"out-{n}", ignore_errors=True)
            shutil.rmtree(inp, ignore_errors=True)
    base = _label(sizes[0])
    for n in sizes[1:]:
        x = _label(n)
        figures[f"cost_ratio_{x}_over_{base}"] = round(figures[f"cpu_s_per_image_{x}"] / figures[f"cpu_s_per_image_{base}"], 3)
        figures[f"wall_ratio_{x}_over_{base}"] = round(figures[f"wall_s_per_image_{x}"] / figures[f"wall_s_per_image_{base}"], 3)
        figures[f"driver_rss_ratio_{x}_over_{base}"] = round(
            figures[f"driver_rss_peak_mb_{x}"] / figures[f"driver_rss_peak_mb_{base}"], 3)
    return figures


if __name__ == "__main__":
    # through the importable module, so the spawned per-size process finds _one_size by name
    import argparse
    import functools
    import sys

    import benchmarks.annotate_scale as _bench

    _ap = argparse.ArgumentParser(add_help=False)
    _ap.add_argument("--sizes", type=int, nargs="+", default=None, help="record counts, smallest first")
    _known, _rest = _ap.parse_known_args(sys.argv[1:])
    run_benchmark("annotate_scale", functools.partial(_bench.measure, sizes=tuple(_known.sizes or ()) or None), _rest)
