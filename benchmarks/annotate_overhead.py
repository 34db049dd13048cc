"""The annotation pipeline's cost apart from the VLM, and how much of it the driver carries.

The real job (``pipelines.annotate.main``) runs on a fresh local Ray instance over 2,000
synthetic image records with the scripted annotator. The CPU time of every process of the run
is read from ``/proc`` (user + system): the driver (this process, less the sampling thread),
the Ray workers (tasks and actors: markers, passes, gate, spool, per-shard balance-and-write,
statistics) and Ray's own daemons (GCS, raylet, agents). Figures:

* ``non_vlm_ms_per_image``: (all CPU time of the run - the scripted annotator's generate CPU
  time) / images, the latter measured in-process per image (``scripted_generate_cpu_ms_per_image``);
* ``driver_share``: driver CPU time / all CPU time of the run (``driver_share_of_driver_and_workers``
  leaves Ray's daemons out of the denominator);
* ``inproc_non_vlm_ms_per_image``: the same stages in one process without Ray
  (``annotate_local``, generate excluded; process CPU time) on the first 256 records: the floor
  the Ray run is compared against.

The 2,000 records reuse 200 distinct synthetic scenes (each image file appears under 10 image
ids; every record is read, decoded, marked, annotated, gated and written on its own), so that
building the input stays a small part of a quick run. Linux only (``/proc``). Diagnostics: the
CPU of each part, the number of Ray worker processes and the busiest workers and daemons;
``ANNOTATE_OVERHEAD_IMAGES=N`` runs N records instead of 2,000 (debugging only).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

from benchmarks._common import run_benchmark

N_IMAGES, N_SCENES = int(os.environ.get("ANNOTATE_OVERHEAD_IMAGES", 2000)), 200  # the variable: for debugging only
_TICK = os.sysconf("SC_CLK_TCK")


def _world(root: Path) -> Path:
    import pyarrow.parquet as pq
    from PIL import Image

    from relate.data.synthetic import SyntheticConfig, make_scene
    from relate.schema import CORPUS_SCHEMA, to_table

    (root / "images").mkdir(parents=True)
    scenes = []
    for i in range(N_SCENES):
        s = make_scene(i, SyntheticConfig(seed=1))
        uri = root / "images" / f"{s.image_id}.png"
        Image.fromarray(s.image).save(uri)
        scenes.append(s.to_record(str(uri), "train"))
    rows = [dict(scenes[k % N_SCENES], image_id=f"{scenes[k % N_SCENES]['image_id']}-{k // N_SCENES:02d}")
            for k in range(N_IMAGES)]
    (root / "corpus" / "train").mkdir(parents=True)
    pq.write_table(to_table(rows, CORPUS_SCHEMA), root / "corpus" / "train" / "part-0.parquet")
    return root


def _proc_table() -> dict[int, tuple[int, str, float]]:
    """pid -> (parent pid, command line, CPU seconds user + system) for every readable process."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as fh:
                stat = fh.read()
            with open(f"/proc/{d}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        f = stat[stat.rindex(")") + 2:].split()  # fields after the command name: state, ppid, ...
        out[int(d)] = (int(f[1]), cmd, (int(f[11]) + int(f[12])) / _TICK)
    return out


class _CpuSampler:
    """Samples the CPU time of this process's descendants every 0.2 s (a process that exits
    keeps its last sample), and its own cost, to be taken off the driver's."""

    def __init__(self) -> None:
        self.me = os.getpid()
        self.last: dict[int, tuple[str, float]] = {}
        self.first: dict[int, float] = {}  # CPU at the start; 0 for processes started during the run
        self.started = False
        self.own_cpu = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def sample(self) -> None:
        t0 = time.thread_time()
        procs = _proc_table()
        kids: dict[int, list[int]] = {}
        for pid, (ppid, _, _) in procs.items():
            kids.setdefault(ppid, []).append(pid)
        stack, seen = list(kids.get(self.me, [])), set()
        while stack:
            pid = stack.pop()
            if pid in seen:
                continue
            seen.add(pid)
            stack += kids.get(pid, [])
            _, cmd, cpu = procs[pid]
            self.first.setdefault(pid, 0.0 if self.started else cpu)
            if not cmd and pid in self.last:  # an exited, not yet reaped process (zombie) has no command line
                cmd = self.last[pid][0]
            self.last[pid] = (cmd, cpu)
        self.own_cpu += time.thread_time() - t0

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            self.sample()

    def start(self) -> None:
        self.sample()
        self.started = True
        self._thread.start()

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join()
        self.sample()
        workers = system = 0.0
        daemons: dict[str, float] = {}
        per_worker: list[tuple[float, str]] = []
        for pid, (cmd, cpu) in self.last.items():
            used = cpu - self.first[pid]
            name = os.path.basename((cmd.split() or ["?"])[0])
            if ("default_worker.py" in cmd or cmd.startswith("ray::")) and "Agent" not in name:
                workers += used
                per_worker.append((used, cmd.split()[0] if cmd.startswith("ray::") else "ray::?"))
            else:
                system += used
                if name == "python" and len(cmd.split()) > 1:
                    name = os.path.basename(cmd.split()[1 + (cmd.split()[1] == "-u")])
                daemons[name] = daemons.get(name, 0.0) + used
        top = sorted(daemons.items(), key=lambda kv: -kv[1])[:4]
        per_worker.sort(reverse=True)
        return {"workers": workers, "system": system, "daemons": ", ".join(f"{k} {v:.1f}" for k, v in top),
                "n_workers": len(per_worker), "top_workers": ", ".join(f"{k} {v:.1f}" for v, k in per_worker[:4])}


def _ray_run(world: Path, out: Path, generate_cpu_ms: float) -> dict:
    import ray

    from pipelines.annotate import AnnotateConfig, main

    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        ray.data.DataContext.get_current().enable_progress_bars = False
        cfg = AnnotateConfig(input_dir=str(world), out_dir=str(out), splits=["train"], duplicate_person_rate=0.1)
        time.sleep(2.0)  # let the idle workers Ray starts with finish importing before the clock starts
        sampler = _CpuSampler()
        sampler.start()
        d0, t0 = time.process_time(), time.perf_counter()
        res = main(cfg)
        wall = time.perf_counter() - t0
        driver = time.process_time() - d0
        others = sampler.stop()
        driver -= sampler.own_cpu
    finally:
        ray.shutdown()
    assert res.complete and res.stats["images"] == N_IMAGES, "the benchmark run must annotate every image"
    vlm = generate_cpu_ms * N_IMAGES / 1000  # the scripted annotator's CPU time (measured in-process)
    total = driver + others["workers"] + others["system"]
    return {"non_vlm_ms_per_image": round(1000 * (total - vlm) / N_IMAGES, 3),
            "driver_share": round(driver / total, 4),
            "driver_share_of_driver_and_workers": round(driver / (driver + others["workers"]), 4),
            "driver_cpu_s": round(driver, 2), "worker_cpu_s": round(others["workers"], 2),
            "ray_worker_processes": others["n_workers"], "ray_worker_cpu_s_top": others["top_workers"],
            "ray_daemons_cpu_s": round(others["system"], 2), "ray_daemons_cpu_s_top": others["daemons"], "scripted_generate_cpu_s": round(vlm, 2),
            "images": N_IMAGES, "wall_s": round(wall, 2), "images_per_s": round(N_IMAGES / wall, 2)}


def _inproc(world: Path, out: Path, n: int) -> tuple[float, float]:
    """CPU ms per image of the stages in one process, generate excluded, and of generate alone
    (the scripted annotator), each timed with the process CPU clock."""
    from pipelines import annotate_stages as st
    from pipelines.annotate import AnnotateConfig, annotate_local, shard_plan

    cfg = AnnotateConfig(input_dir=str(world), out_dir=str(out), splits=["train"], duplicate_person_rate=0.1, limit=n)
    spent = [0.0]
    orig = st.GenerateStage.__call__

    def timed(self, batch):
        t = time.process_time()
        try:
            return orig(self, batch)
        finally:
            spent[0] += time.process_time() - t

    st.GenerateStage.__call__ = timed
    try:
        plan = shard_plan(cfg)
        t0 = time.process_time()
        annotate_local(plan, cfg, out)
        total = time.process_time() - t0
    finally:
        st.GenerateStage.__call__ = orig
    return 1000 * (total - spent[0]) / n, 1000 * spent[0] / n


def measure(quick: bool) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        world = _world(root / "world")
        build_s = time.perf_counter() - t0
        inproc = min(_inproc(world, root / f"local{k}", 256) for k in range(1 if quick else 3))
        figures = _ray_run(world, root / "out", inproc[1])
        figures["inproc_non_vlm_ms_per_image"] = round(inproc[0], 3)
        figures["scripted_generate_cpu_ms_per_image"] = round(inproc[1], 3)
        figures["input_build_s"] = round(build_s, 2)
        shutil.rmtree(root / "out", ignore_errors=True)
    return figures


if __name__ == "__main__":
    run_benchmark("annotate_overhead", measure)
