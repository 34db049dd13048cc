"""One optimiser step of the relation model's training recipe, in process (CPU).

Figures:
* ``steps_per_s``: full steps per second of ``cpu_small`` (forward with forced annotated pairs,
  ``relation_objective``, backward, clip, AdamW) on a batch of 16 decoded synthetic scenes at the
  recipe's base side, with the whole recipe on (batch negatives, the Eq. 3 discount, per-source
  negative masks). ``step_ms`` is its median.
* ``recipe_overhead``: median step time with the discount and the source masks on over the same
  step with both off, arms alternating so machine load hits both alike. Goal <= 1.05.
  ``objective_ms_on`` / ``objective_ms_off`` time ``relation_objective`` alone (forward outputs
  reused), where the two terms' own cost shows.
* ``cpu_long_s_per_step`` and ``decode_share``: ``cpu_long`` through the real job
  (``train_jobs.train_relation``: Ray Train, its one worker of two threads, the input stream, the
  decode cache), run twice on one small full-truth world: the first run decodes the world into the
  cache, the second reads it, as every later run and seed does. ``cpu_long_s_per_step`` is the
  second run's median wall time from one step's TensorBoard event to the next, steps that report to
  Ray Train or validate left out (the recipe reports one step in 20); ``cpu_long_compute_s_per_step``
  the median of the step's own compute time (``step_seconds``). ``decode_share`` is the CPU time of
  the input path (the map stage's actor, its tasks, the split coordinator, Ray Train's dataset
  manager) over that and the training worker's, read from ``/proc`` while the second run trains:
  from its second step's TensorBoard event to its last but one's, what the input takes from the
  steps. What the input path costs once, before the first step (its processes starting, the stream's
  blocks made ahead), is ``input_startup_cpu_s``, a fixed cost that a 62-step run weighs 45 times more
  than a 2,800-step one; ``decode_share_whole_run`` counts it in, ``decode_share_first_run`` is the
  whole first run, whose map actor also builds the cache. Goal ``decode_share`` <= 0.1.
* ``train_fraction_of_peak``: a full ``cpu_long`` step (``TrainRunner.train_step``: forward, the
  recipe's whole objective, backward, clipping, AdamW, EMA) on a batch of 16 decoded scenes of a
  full-truth world, its FLOPs counted at the scale rung it drew, over its time, divided by the fp32
  matrix-product rate (``gemm_gflops``: 10 products of 1024 x 1024 on the same threads) timed right
  after it; the median over rounds (``timed_rounds``), each round a step, the GEMM block and the
  step's products alone, so a shared machine's drift in speed falls on all three alike. Goal >= 0.6
  (issue 49). The count is ``benchmarks.relation_cpu.forward_flops``'s: attention counted as its two
  products, forward and backward (the backbone's and the pair transformer's,
  ``cpu_long_gflop_per_step``), which torch's ``FlopCounterMode`` misses on the CPU kernels that run
  them (``cpu_long_gflop_fused_count``, the count before 2026-12-07).
* ``train_products_fraction_of_peak``: the same FLOPs over the time of the step's own matrix
  products, convolutions and attention kernels replayed alone at their shapes and layouts
  (``benchmarks._products_alone``; ``cpu_long_products_ms``): the fraction the step would reach if
  every other op took no time, the ceiling its shapes put on ``train_fraction_of_peak``.
* ``cpu_long_pinned_ms``: the step's time in the elementwise kernels whose results the fixed-seed step
  test (``tests/unit/test_step_numerics.py``) holds and for which torch has no cheaper kernel of the
  same numbers (``PINNED_OPS``: dropout's mask draws from the generator's stream, GELU's erf, the layer
  normalisations, the softmaxes, the fused AdamW), read from torch's profiler over single steps (the
  median). ``cpu_long_floor_ms`` adds the products alone, and ``train_floor_fraction_of_peak`` is the
  counted FLOPs over that floor, over the round's GEMM rate: what ``train_fraction_of_peak`` could reach
  while the step computes the numbers it computes now, with every other op (copies, indexing, the
  objective's bookkeeping, ``roi_align``) taking no time at all. ``cpu_long_floor_min``: the recipe's
  ``max_steps`` at that floor, in minutes, before validation, checkpoints and Ray Train.

The predicate space is the training job's own (``train_jobs.relation_data.build_space`` on a
small corpus of the positive-unlabeled synthetic world, ``pipelines/configs/synthetic_pu.yaml``:
three sources of different scope, pairs stated with some of their true predicates), so P(q|p) is
estimated from real co-annotations and the scoped sources' masks are live.

``python -m benchmarks.train_step [--quick] [--out FILE]``
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

CONFIG = Path(__file__).resolve().parents[1] / "train_jobs" / "configs" / "cpu_small.yaml"


PU_WORLD = Path(__file__).resolve().parents[1] / "pipelines" / "configs" / "synthetic_pu.yaml"
# the GEMM block timed beside each step: 10 fp32 products of 1024 x 1024 (21.5 GFLOP)
GEMM_N, GEMM_REPEATS = 1024, 10


def _corpus(root: Path, n: int):
    """A train split of ``n`` scenes of the positive-unlabeled world; returns its SyntheticConfig."""
    import yaml

    from relate.data.synthetic import SyntheticConfig
    from relate.data.synthetic_corpus import write_corpus

    pu = yaml.safe_load(PU_WORLD.read_text())
    world = SyntheticConfig(num_scenes=n, min_size=96, max_size=128, sources=pu["sources"],
                            multi_label=pu["multi_label"])
    write_corpus(root, world)
    return world


def measure(quick: bool) -> dict[str, float]:
    import torch

    from relate.config import load_config
    from relate.data.corpus import read_corpus
    from relate.data.synthetic_annotation import source_scopes
    from relate.losses import force_mask, relation_objective
    from relate.model.model import create_relation_model
    from train_jobs.relation_data import DecodeStage, build_space
    from train_jobs.train_relation import TrainRelationConfig

    torch.set_num_threads(os.cpu_count() or 2)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        world = _corpus(root, 40)
        scopes = [f"data.source_scopes.{k}=[{', '.join(v)}]" for k, v in source_scopes(world.sources).items()]
        cfg = load_config(TrainRelationConfig, CONFIG, [
            f"data.corpus_root={root}", f"data.cache_dir={root / 'cache'}", *scopes])
        space = build_space(cfg.data, cfg.model.text_dim)
        train = read_corpus(root, "train")
        stage = DecodeStage(cfg.model.backbone.img_size, cfg.data, space["forms"], space["categories"],
                            sources=space["sources"], keep_aspect=cfg.model.backbone.keep_aspect)
        batch = {k: torch.from_numpy(v) for k, v in stage(train.slice(0, cfg.optim.batch_size)).items()}
    model = create_relation_model(cfg.model).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    bank = space["bank"].tensor("cpu")
    images = batch["image"].permute(0, 3, 1, 2).float().div_(255)
    boxes, valid, rels, cats = batch["boxes"], batch["box_valid"], batch["rels"], batch["categories"]
    force = force_mask(rels, valid.shape[1])
    on = cfg.loss
    off = on.model_copy(update={"pu_discount": False, "source_negatives": False})
    pspace = space["space"]

    def step(loss_cfg) -> float:
        t0 = time.perf_counter()
        out = model(images, boxes, valid, bank, force=force)
        terms = relation_objective(out, rels, cats, valid, pspace, loss_cfg, sources=batch["source"],
                                   conditions=batch.get("conditions"), complete=batch.get("complete"))
        opt.zero_grad(set_to_none=True)
        terms["total"].backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return time.perf_counter() - t0

    rounds = 6 if quick else 30
    for _ in range(2):  # warm-up: allocator, oneDNN primitives
        step(on), step(off)
    t_on, t_off = [], []
    for _ in range(rounds):
        t_on.append(step(on))
        t_off.append(step(off))
    with torch.no_grad():  # the objective alone, on one forward's outputs
        out = model(images, boxes, valid, bank, force=force)
        o_on, o_off = [], []
        for _ in range(rounds * 3):
            for arm, acc in ((on, o_on), (off, o_off)):
                t0 = time.perf_counter()
                relation_objective(out, rels, cats, valid, pspace, arm, sources=batch["source"],
                                   conditions=batch.get("conditions"), complete=batch.get("complete"))
                acc.append(time.perf_counter() - t0)
    m_on, m_off = statistics.median(t_on), statistics.median(t_off)
    return {**_cpu_long_fraction(rounds), **_through_the_job(quick), "steps_per_s": round(1 / m_on, 3), "step_ms": round(m_on * 1e3, 1),
            "recipe_overhead": round(m_on / m_off, 4), "step_ms_off": round(m_off * 1e3, 1),
            "objective_ms_on": round(statistics.median(o_on) * 1e3, 2),
            "objective_ms_off": round(statistics.median(o_off) * 1e3, 2),
            "batch_size": cfg.optim.batch_size, "side": cfg.model.backbone.img_size,
            "scoped_images": int((batch["source"] > 0).sum()), "p_cond_nonzero": int((pspace.p_cond > 0).sum())}


def _recipe_batch(recipe: Path, overrides: list[str] = ()):
    """The recipe's config, its predicate space and one decoded batch of a full-truth world (its
    batch size of scenes, decoded by the job's own ``DecodeStage`` at the recipe's side)."""
    import torch

    from relate.config import load_config
    from relate.data.corpus import read_corpus
    from relate.data.synthetic import SyntheticConfig
    from relate.data.synthetic_corpus import write_corpus
    from train_jobs.relation_config import TrainRelationConfig
    from train_jobs.relation_data import DecodeStage, build_space

    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        n = load_config(TrainRelationConfig, recipe, list(overrides)).optim.batch_size
        write_corpus(root, SyntheticConfig(num_scenes=max(n, 16), coverage="full"))
        cfg = load_config(TrainRelationConfig, recipe, [f"data.corpus_root={root}", f"data.cache_dir={root / 'cache'}",
                                                        "data.decode_cache=false", *overrides])
        space = build_space(cfg.data, cfg.model.text_dim)
        stage = DecodeStage(cfg.model.backbone.img_size, cfg.data, space["forms"], space["categories"],
                            seed=cfg.run.seed, sources=space["sources"], keep_aspect=cfg.model.backbone.keep_aspect)
        rows = read_corpus(root, "train").slice(0, cfg.optim.batch_size)
        batch = {k: torch.from_numpy(v) for k, v in stage(rows).items()}
    return cfg, space, batch


def recipe_step_cost(recipe: str | Path, device: str = "cuda", steps: int = 10, warmup: int = 3,
                     overrides: list[str] = ()) -> dict[str, float]:
    """A recipe's full training step (``TrainRunner.train_step``, the recipe's batch, side, objective,
    optimiser and mixed precision) on ``device``: the median of ``steps`` timed steps after ``warmup``
    (each step synchronised on a GPU), its FLOPs counted as ``train_fraction_of_peak`` counts them, and
    the GPU's peak memory over the timed steps. ``scripts/gpu_smoke.sh`` runs it for ``released.yaml`` with random backbone
    weights (the machine has no hub; a step costs the same)."""
    import torch

    from train_jobs.relation_worker import TrainRunner

    dev = torch.device(device)
    cfg, space, batch = _recipe_batch(Path(recipe), list(overrides))
    runner = TrainRunner(cfg, space, cfg.optim.max_steps, device=dev)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    for _ in range(warmup):
        runner.train_step(batch)
    sync()
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    times, sides = [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        sides.append(runner.train_step(batch)["rung_side"])
        sync()
        times.append(time.perf_counter() - t0)
    peak = torch.cuda.max_memory_allocated(dev) / 2 ** 30 if dev.type == "cuda" else None
    flops = _per_rung(lambda: _counted(lambda: runner.train_step(batch)["rung_side"]), sides)  # the rungs timed
    sync()
    timed = [(t, s) for t, s in zip(times, sides) if s in flops]
    return {"recipe": Path(recipe).stem, "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
            "batch_size": cfg.optim.batch_size, "side": cfg.model.backbone.img_size,
            "amp": bool(cfg.optim.amp) and dev.type == "cuda",
            "step_ms": round(statistics.median(times) * 1e3, 1),
            "gflop_per_step": round(statistics.median(flops[s] for _, s in timed) / 1e9, 1),
            "tflops": round(statistics.median(flops[s] / t for t, s in timed) / 1e12, 3),
            "peak_memory_gib": None if peak is None else round(peak, 2)}


def _per_rung(measure, needed, tries: int = 40) -> dict:
    """``measure()`` -> (the side of the scale rung its step drew, a value), called until each side in
    ``needed`` has its first value (a step draws its rung at random; ``tries`` steps at most)."""
    out: dict = {}
    for _ in range(tries):
        side, value = measure()
        out.setdefault(side, value)
        if set(needed) <= set(out):
            break
    return out


def _counted(step, decomposed: bool = True) -> tuple[int, int]:
    """(the rung ``step()`` drew, its FLOPs by ``benchmarks.relation_cpu.forward_flops``)."""
    from benchmarks.relation_cpu import forward_flops

    got: dict = {}
    count = forward_flops(lambda: got.setdefault("side", step()), decomposed)
    return got["side"], count


def _replayable(step) -> tuple:
    """(the rung ``step()`` drew, a function that replays its products alone: ``benchmarks._products_alone``)."""
    from benchmarks._products_alone import record_products, replay

    side, calls = record_products(step)
    return side, replay(calls)


# Elementwise kernels whose outputs the fixed-seed step test holds, with no cheaper torch kernel of the same numbers:
# dropout's masks are the CPU generator's stream drawn in order, GELU is the exact (erf) form, and the
# normalisations, softmaxes and AdamW's update are one fused kernel each already.
PINNED_OPS = ("aten::bernoulli_", "aten::gelu", "aten::gelu_backward", "aten::native_layer_norm",
              "aten::native_layer_norm_backward", "aten::_softmax", "aten::_softmax_backward_data",
              "aten::_fused_adamw_")


def pinned_ms(step, steps: int) -> list[float]:
    """Milliseconds of each of ``steps`` calls of ``step()`` spent in ``PINNED_OPS`` (self time, torch's
    profiler; an op's intra-op threads run inside its own time on the calling thread)."""
    from torch.profiler import ProfilerActivity, profile

    out = []
    for _ in range(steps):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            step()
        out.append(sum(e.self_cpu_time_total for e in prof.key_averages() if e.key in PINNED_OPS) / 1e3)
    return out


def _cpu_long_fraction(rounds: int) -> dict[str, float]:
    """``cpu_long``'s full training step against the GEMM rate measured here (module docstring)."""
    import torch

    from train_jobs.relation_worker import TrainRunner, _rung_side

    threads = os.cpu_count() or 2
    cfg, space, batch = _recipe_batch(CONFIG.parent / "cpu_long.yaml")
    torch.set_num_threads(threads)
    runner = TrainRunner(cfg, space, cfg.optim.max_steps)
    step = lambda: runner.train_step(batch)["rung_side"]  # noqa: E731
    sides = {_rung_side(cfg.model.backbone.img_size, r, runner.raw.preprocessing.patch_size) for r in cfg.data.rungs}
    flops = _per_rung(lambda: _counted(step), sides)  # attention included
    fused = _per_rung(lambda: _counted(step, decomposed=False), sides)  # as the fused kernels run (attention: 0)
    alone = _per_rung(lambda: _replayable(step), sides)  # the products and attention kernels, to replay alone
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(GEMM_N, GEMM_N, generator=g), torch.randn(GEMM_N, GEMM_N, generator=g)
    out = torch.empty(GEMM_N, GEMM_N)

    def gemm() -> None:
        for _ in range(GEMM_REPEATS):
            torch.mm(a, b, out=out)

    gemm()
    # Each round times a step, the GEMM block and the step's products alone, one after another, and its
    # ratios use that round's own GEMM rate: a shared machine's speed drifts by 20-30% within minutes
    # (141-172 GFLOP/s in one hour of 2026-12-07), which a rate measured once, before or after, would
    # put in the ratio.
    rows: list[tuple[float, float, float, int]] = []
    for _ in range(max(rounds * 2, 10)):
        t0 = time.perf_counter()
        side = step()
        t_step = time.perf_counter() - t0
        t0 = time.perf_counter()
        gemm()
        rate = 2 * GEMM_N ** 3 * GEMM_REPEATS / (time.perf_counter() - t0)
        if side in flops and side in alone:
            t0 = time.perf_counter()
            alone[side]()
            rows.append((t_step, time.perf_counter() - t0, rate, side))
    if not rows:
        raise RuntimeError(f"no timed step drew a rung whose FLOPs were counted (counted {sorted(flops)}, "
                           f"replayable {sorted(alone)})")
    med = statistics.median
    pinned = med(pinned_ms(step, max(rounds, 6))) / 1e3
    floor = med(u for _, u, _, _ in rows) + pinned  # the products alone plus the pinned kernels, seconds
    return {"train_fraction_of_peak": round(med(flops[s] / t / r for t, _, r, s in rows), 3),
            "train_floor_fraction_of_peak": round(med(flops[s] / (u + pinned) / r for _, u, r, s in rows), 3),
            "cpu_long_pinned_ms": round(pinned * 1e3, 1),
            "cpu_long_floor_ms": round(floor * 1e3, 1),
            # the recipe's steps at that floor, nothing else counted (no validation, checkpoints or Ray)
            "cpu_long_floor_min": round(floor * cfg.optim.max_steps / 60, 1),
            "cpu_long_gflop_per_s": round(med(flops[s] / t for t, _, _, s in rows) / 1e9, 1),
            "train_products_fraction_of_peak": round(med(flops[s] / u / r for _, u, r, s in rows), 3),
            "cpu_long_products_ms": round(med(u for _, u, _, _ in rows) * 1e3, 1),
            "gemm_gflops": round(med(r for _, _, r, _ in rows) / 1e9, 1),
            "cpu_long_step_ms": round(med(t for t, _, _, _ in rows) * 1e3, 1),
            "cpu_long_gflop_per_step": round(med(flops.values()) / 1e9, 2),
            "cpu_long_gflop_fused_count": round(med(fused.values()) / 1e9, 2), "threads": threads,
            "timed_rounds": len(rows)}


# the input path: the map stage's actor (decoding, or reading the decode cache), its read tasks, the split
# coordinator that runs the stream, and Ray Train's dataset manager, which exists for the dataset alone
_INPUT_PATH = ("DecodeStage", "MapBatches", "MapWorker", "ReadTask", "FromItems", "SplitCoordinator",
               "DatasetManager")


def _process_cpu(root_pid: int) -> dict[int, tuple[str, float]]:
    """pid -> (command line, CPU seconds user + system) of ``root_pid``'s descendants."""
    from benchmarks.annotate_overhead import _proc_table

    procs = _proc_table()
    kids: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        kids.setdefault(ppid, []).append(pid)
    out, stack = {}, list(kids.get(root_pid, []))
    while stack:
        pid = stack.pop()
        if pid not in out:
            out[pid] = procs[pid][1:]
            stack += kids.get(pid, [])
    return out


def _part(line: str) -> str:
    return "input" if any(k in line for k in _INPUT_PATH) else "trainer" if "RayTrainWorker" in line else "other"


@dataclass
class _JobCpu:
    """One training job's processes' CPU, sampled every 0.2 s: ``samples`` is a list of (wall time,
    {part: CPU seconds so far}), a process that exits keeping its last sample."""

    samples: list[tuple[float, dict[str, float]]]

    @property
    def total(self) -> dict[str, float]:
        return self.samples[-1][1]

    def at(self, t: float) -> dict[str, float]:
        """CPU so far of each part at wall time ``t`` (the last sample taken by then)."""
        return ([c for when, c in self.samples if when <= t] or [self.samples[0][1]])[-1]

    def share(self, t0: float | None = None, t1: float | None = None) -> float:
        """The input path's share of its and the trainer's CPU between ``t0`` and ``t1`` (whole run: None)."""
        a = self.at(t0) if t0 is not None else {"input": 0.0, "trainer": 0.0}
        b = self.at(t1) if t1 is not None else self.total
        inp, tr = b["input"] - a["input"], b["trainer"] - a["trainer"]
        return inp / max(inp + tr, 1e-9)


def _job_run(cmd: list[str], cwd: Path) -> _JobCpu:
    """Run one training job, sampling its processes' CPU every 0.2 s (``_JobCpu``)."""
    import subprocess
    import sys
    import threading

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RAY_ADDRESS": ""}
    proc = subprocess.Popen([sys.executable, "-m", *cmd], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    seen: dict[int, tuple[str, float]] = {}
    samples: list[tuple[float, dict[str, float]]] = []
    tail: list[str] = []
    reader = threading.Thread(target=lambda: tail.extend(proc.stdout), daemon=True)
    reader.start()
    while proc.poll() is None:
        for pid, (line, cpu) in _process_cpu(proc.pid).items():
            seen[pid] = (line or seen.get(pid, ("", 0))[0], cpu)
        parts = {"input": 0.0, "trainer": 0.0, "other": 0.0}
        for line, cpu in seen.values():
            parts[_part(line)] += cpu
        samples.append((time.time(), parts))
        time.sleep(0.2)
    reader.join()
    if proc.returncode:
        raise RuntimeError(f"training job failed ({proc.returncode}): {''.join(tail[-20:])}")
    if not samples:
        raise RuntimeError("the training job ended before its processes could be sampled")
    return _JobCpu(samples)


def _step_times(run_dir: Path, every: int) -> tuple[list[float], list[float], tuple[float, float]]:
    """(wall seconds from each step's TensorBoard event to the next, each step's compute seconds, the wall
    times of the second step's event and the last but one's: the window of steps), steps that report
    (each ``every``-th and the last) and the one after the first left out."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(next(run_dir.glob("*/tensorboard")))).Reload()
    loss = {e.step: e.wall_time for e in acc.Scalars("loss/total")}
    compute = {e.step: e.value for e in acc.Scalars("step_seconds")}
    steps = sorted(loss)
    walls = [loss[b] - loss[a] for a, b in zip(steps, steps[1:])
             if a > steps[0] and a % every and b % every and b != steps[-1]]
    return walls, [compute[s] for s in steps[2:-1] if s % every], (loss[steps[1]], loss[steps[-2]])


def _through_the_job(quick: bool) -> dict[str, float]:
    """``cpu_long`` through ``train_jobs.train_relation``, twice on one world (module docstring)."""
    from relate.config import load_config
    from relate.data.synthetic import SyntheticConfig
    from relate.data.synthetic_corpus import write_corpus
    from train_jobs.relation_config import TrainRelationConfig

    recipe = CONFIG.parent / "cpu_long.yaml"
    every = load_config(TrainRelationConfig, recipe, []).run.log_every
    steps = 3 * every + 2 if quick else 10 * every + 2
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        write_corpus(root / "world", SyntheticConfig(num_scenes=200 if quick else 600, coverage="full"),
                     lambda i: "val" if i % 10 == 0 else "train")
        runs: dict[str, _JobCpu] = {}
        walls_of: dict[str, float] = {}
        for name in ("first", "again"):
            t0 = time.perf_counter()
            runs[name] = _job_run(["train_jobs.train_relation", "--config", str(recipe),
                                   "--set", f"data.corpus_root={root / 'world'}", "--set", f"data.cache_dir={root / 'cache'}",
                                   "--set", f"optim.max_steps={steps}", "--set", "run.val_images=8",
                                   "--set", "run.evaluate_test=false", "--set", "run.calibrate=false",
                                   "--set", f"run.storage_path={root / name}", "--set", f"run.name={name}"], root)
            walls_of[name] = time.perf_counter() - t0
        walls, compute, (t0, t1) = _step_times(root / "again", every)
    again, first = runs["again"], runs["first"]
    return {"cpu_long_s_per_step": round(statistics.median(walls), 3),
            "cpu_long_compute_s_per_step": round(statistics.median(compute), 3),
            "decode_share": round(again.share(t0, t1), 4), "decode_share_whole_run": round(again.share(), 4),
            "decode_share_first_run": round(first.share(), 4),
            "input_startup_cpu_s": round(again.at(t0)["input"], 1),
            "job_input_cpu_s": round(again.total["input"], 1), "job_trainer_cpu_s": round(again.total["trainer"], 1),
            "job_other_cpu_s": round(again.total["other"], 1), "job_steps": steps, "job_steps_timed": len(walls),
            "job_wall_s_first": round(walls_of["first"], 1), "job_wall_s_again": round(walls_of["again"], 1)}


if __name__ == "__main__":
    from benchmarks._common import run_benchmark

    run_benchmark("train_step", measure)
