"""The same ``cpu_long`` training step timed in a plain process, in a Ray task and in a Ray Train worker.

    python -m scripts.step_under_ray                  # the four places in turn, two rounds
    python -m scripts.step_under_ray --rounds 3 --steps 40

``ray_train_job`` is the Ray Train worker on a local instance started as the training jobs start it
(``train_jobs.local_ray.init_ray``: the placement-group cleaner's state API warnings dropped).

Each place runs ``TrainRunner.train_step`` on one decoded batch of 16 scenes of a full-truth world
(``benchmarks.train_step._recipe_batch``: the recipe's side, objective and optimiser), two torch
threads, the same seed and so the same scale rungs, in a fresh process of its own (a fresh local
Ray instance for each place under Ray; no Ray Data stream in any of them). Per place: the median step
time at each rung, the mean, and the step's CPU time over its wall time (2.0 when both threads
compute throughout). ``benchmarks.train_step`` compares the step in process with the real job
(``cpu_long_step_ms`` against ``cpu_long_compute_s_per_step``); this script says which layer the
difference comes from. The places alternate so that a shared machine's drift falls on all alike.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

PLACES = ("process", "ray_task", "ray_train", "ray_train_job")


def _timed(steps: int) -> dict:
    """Time ``steps`` cpu_long steps here (after three untimed ones)."""
    import torch

    from benchmarks.train_step import CONFIG, _recipe_batch
    from train_jobs.relation_worker import TrainRunner

    torch.set_num_threads(2)
    cfg, space, batch = _recipe_batch(CONFIG.parent / "cpu_long.yaml")
    runner = TrainRunner(cfg, space, cfg.optim.max_steps)
    for _ in range(3):
        runner.train_step(batch)
    per_rung: dict[int, list[float]] = {}
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for _ in range(steps):
        t = time.perf_counter()
        side = runner.train_step(batch)["rung_side"]
        per_rung.setdefault(side, []).append(time.perf_counter() - t)
    wall = time.perf_counter() - wall0
    return {"median_ms_by_rung": {str(k): round(statistics.median(v) * 1e3) for k, v in sorted(per_rung.items())},
            "mean_ms": round(wall / steps * 1e3), "cpu_over_wall": round((time.process_time() - cpu0) / wall, 2),
            "niceness": os.nice(0)}


def _in_train_worker(config: dict) -> None:
    # written to a file: Ray Train 2's result keeps the metrics of checkpointed reports only
    with open(config["out"], "w") as f:
        json.dump(_timed(config["steps"]), f)


def _one(place: str, steps: int) -> dict:
    if place == "process":
        return _timed(steps)
    import ray

    if place == "ray_train_job":  # Ray as the training jobs start it (train_jobs.local_ray)
        from train_jobs.local_ray import init_ray

        init_ray()
    else:
        ray.init(include_dashboard=False, configure_logging=False)
    try:
        if place == "ray_task":
            return ray.get(ray.remote(num_cpus=1)(_timed).remote(steps))
        import tempfile

        from ray.train import RunConfig, ScalingConfig
        from ray.train.torch import TorchTrainer

        with tempfile.TemporaryDirectory() as d:  # cpu_long's worker: one, one CPU reserved, two torch threads
            out = os.path.join(d, "timed.json")
            TorchTrainer(_in_train_worker, train_loop_config={"steps": steps, "out": out},
                         scaling_config=ScalingConfig(num_workers=1, resources_per_worker={"CPU": 1}),
                         run_config=RunConfig(storage_path=d)).fit()
            with open(out) as f:
                return json.load(f)
    finally:
        ray.shutdown()


def main(argv=None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2, help="rounds of the four places (default 2)")
    ap.add_argument("--steps", type=int, default=24, help="timed steps in each place (default 24)")
    ap.add_argument("--one", choices=PLACES, help=argparse.SUPPRESS)  # a single place, in this process
    args = ap.parse_args(argv)
    if args.one:
        print("STEP_UNDER_RAY " + json.dumps(_one(args.one, args.steps)), flush=True)
        return []
    rows = []
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    for r in range(args.rounds):
        for place in PLACES:
            out = subprocess.run([sys.executable, "-m", "scripts.step_under_ray", "--one", place, "--steps",
                                  str(args.steps)], capture_output=True, text=True, env=env)
            line = next((ln for ln in out.stdout.splitlines() if ln.startswith("STEP_UNDER_RAY ")), None)
            if out.returncode != 0 or line is None:
                sys.exit(f"{place} (round {r + 1}) failed with exit code {out.returncode}:\n{out.stderr[-3000:]}")
            row = {"round": r + 1, "place": place, **json.loads(line.split(" ", 1)[1])}
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


if __name__ == "__main__":
    main()
