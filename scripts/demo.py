"""The main job on the embedded default: the whole loop on a local Ray instance, CPU only, no hub.

1. synthetic world (Ray Data)             -> runs/demo/synthetic
2. annotation: scripted VLM + gate         -> runs/demo/annotated
3. training: cpu_small with Ray Train      -> runs/demo/train (checkpoint + test report)
4. evaluation: OV-SGG-Bench on the exports -> runs/demo/ovsgg (results.json, table.md, radar.png)
5. serving: Ray Serve + one HTTP request   -> runs/demo/serve (graph JSON + rendered PNG)
6. triplet probe: baselines + tiny ViT     -> runs/demo/triplet_probe

Each stage prints what it did. ``--steps`` sets the training length (default 150 optimiser steps);
``--only`` runs a subset of stages (they reuse earlier stages' outputs).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
RUN = ROOT / "runs" / "demo"
STAGES = ("synthetic", "annotate", "train", "evaluate", "serve", "probe")


def _banner(i: int, title: str) -> float:
    print(f"\n== {i}/{len(STAGES)} {title} ==", flush=True)
    return time.perf_counter()


def stage_synthetic(scenes: int) -> None:
    from pipelines.synthetic import SyntheticJobConfig, main

    main(SyntheticJobConfig(num_scenes=scenes, out_dir=str(RUN / "synthetic")))


def stage_annotate() -> None:
    from pipelines.annotate import AnnotateConfig, main
    from relate.config import load_config

    cfg = load_config(AnnotateConfig, ROOT / "pipelines/configs/annotate_synthetic.yaml",
                      [f"input_dir={RUN / 'synthetic'}", f"out_dir={RUN / 'annotated'}"])
    main(cfg)


def _follow(path: Path, done: threading.Event) -> None:
    """Print lines appended to ``path`` until ``done`` is set (and once more after)."""
    pos = 0
    while True:
        finished = done.wait(2.0)
        if path.is_file():
            with path.open() as fh:
                fh.seek(pos)
                for line in fh:
                    print("  " + line.rstrip(), flush=True)
                pos = fh.tell()
        if finished:
            return


def stage_train(steps: int) -> str:
    from relate.config import load_config
    from train_jobs.train_relation import TrainRelationConfig, main, progress_file

    from train_jobs.run_files import latest_step

    # The demo keeps one run folder, runs/demo/train/cpu_small (run.unique_name=false). An
    # interrupted demo run (a checkpoint short of the last step, no LATEST) is resumed explicitly
    # (run.resume=true); a finished one is trained afresh; anything else there is cleared first.
    latest, run_dir = RUN / "train" / "LATEST", RUN / "train" / "cpu_small"
    resume = not latest.is_file() and 0 < latest_step(str(RUN / "train"), "cpu_small") < steps
    if latest.is_file():
        print(f"  previous demo run finished: training {run_dir} afresh", flush=True)
        latest.unlink()
    if not resume:
        shutil.rmtree(run_dir, ignore_errors=True)
    cfg = load_config(TrainRelationConfig, ROOT / "train_jobs/configs/cpu_small.yaml",
                      [f"data.corpus_root={RUN / 'annotated'}", f"data.truth_root={RUN / 'synthetic'}",
                       f"optim.max_steps={steps}",
                       f"run.storage_path={RUN / 'train'}", "run.name=cpu_small", "run.unique_name=false",
                       f"run.resume={str(resume).lower()}"])
    # worker logs are not forwarded here (log_to_driver=False): follow rank 0's progress file
    progress = Path(progress_file(str(RUN / "train"), "cpu_small"))
    progress.unlink(missing_ok=True)
    done = threading.Event()
    follower = threading.Thread(target=_follow, args=(progress, done), daemon=True)
    follower.start()
    try:
        res = main(cfg)
    finally:
        done.set()
        follower.join(timeout=5)
    if res.checkpoint is None:
        raise RuntimeError("training finished without a checkpoint")
    (RUN / "train" / "LATEST").write_text(res.checkpoint)
    return res.checkpoint


def _checkpoint() -> str:
    path = RUN / "train" / "LATEST"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: run the train stage first")
    return path.read_text().strip()


def stage_evaluate() -> None:
    import pyarrow.parquet as pq

    from eval_jobs.ovsgg import OVSGGConfig, main
    from eval_jobs.prepare import prepare_synthetic
    from relate.config import load_config
    from relate.data.corpus import read_corpus

    prepare_synthetic(RUN / "synthetic", RUN / "prepared")  # = python -m eval_jobs.prepare synthetic
    bench = RUN / "prepared" / "synthetic"
    train_file = RUN / "ovsgg_train_corpus.parquet"
    pq.write_table(read_corpus(RUN / "annotated", "train"), train_file)
    cfg = load_config(OVSGGConfig, ROOT / "eval_jobs/configs/ovsgg_synthetic.yaml",
                      [f"out_dir={RUN / 'ovsgg'}", f"inference.checkpoint={_checkpoint()}"])
    for b in cfg.benchmarks:
        b.path = str(bench / Path(b.path).name)
        if b.detections:
            b.detections = str(bench / Path(b.detections).parent.name / Path(b.detections).name)
    for s in cfg.systems:
        s.train_corpus = str(train_file)
    main(cfg)
    print((RUN / "ovsgg" / "table.md").read_text())


def stage_serve() -> None:
    from scripts.serve_demo import run

    run(checkpoint=_checkpoint(), out_dir=RUN / "serve")


def stage_probe() -> None:
    from eval_jobs.triplet_probe import TripletProbeConfig, main
    from relate.config import load_config

    main(load_config(TripletProbeConfig, ROOT / "eval_jobs/configs/triplet_probe_synthetic.yaml",
                     [f"output_dir={RUN / 'triplet_probe'}"]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenes", type=int, default=2000, help="synthetic scenes to build")
    ap.add_argument("--steps", type=int, default=150, help="training steps of the cpu_small recipe")
    ap.add_argument("--only", nargs="*", choices=STAGES, default=list(STAGES), help="stages to run")
    args = ap.parse_args(argv)

    import ray

    ray.init(include_dashboard=False, configure_logging=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    runners = {
        "synthetic": lambda: stage_synthetic(args.scenes),
        "annotate": stage_annotate,
        "train": lambda: stage_train(args.steps),
        "evaluate": stage_evaluate,
        "serve": stage_serve,
        "probe": stage_probe,
    }
    t_all = time.perf_counter()
    for i, name in enumerate(STAGES, 1):
        if name in args.only:
            t0 = _banner(i, name)
            runners[name]()
            print(f"-- {name} done in {time.perf_counter() - t0:.0f} s", flush=True)
    ray.shutdown()
    print(f"\nall stages done in {time.perf_counter() - t_all:.0f} s; outputs under {RUN}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
