"""The main job on the embedded default: the whole loop on a local Ray instance, CPU only, no hub.

1. synthetic world (Ray Data)             -> runs/demo/synthetic
2. annotation: scripted VLM + gate         -> runs/demo/annotated
3. training: cpu_small with Ray Train      -> runs/demo/train (checkpoint + test report), runs/demo/checkpoint
4. evaluation: OV-SGG-Bench on the exports -> runs/demo/prepared, runs/demo/ovsgg (results.json, table.md, radar.png)
5. serving: Ray Serve + one HTTP request   -> runs/demo/serve (graph JSON + rendered PNG, the scene and its boxes)
6. triplet probe: baselines + tiny ViT     -> runs/demo/triplet_probe

These are the paths the shipped synthetic configs read, so the README's commands run on what the
demo leaves: ``runs/demo/checkpoint`` links to the trained checkpoint folder, and the serving
stage saves its request's scene and boxes for ``relate predict``.

Each stage prints what it did in a few lines and where its full report is. Everything else the
stage writes to stdout and stderr (its own tables, Ray's and the libraries' logs, from Python, C++
and child processes alike) goes to ``runs/demo/logs/<stage>.log``; a stage that fails prints the
end of its log before the traceback. ``--verbose`` shows it all on the terminal instead.
``--steps`` sets the training length (default 150 optimiser steps), ``--scenes`` the world's size
(``make demo DEMO_ARGS="--scenes 60 --steps 6"`` is the README test's small demo); ``--only`` runs a
subset of stages (they reuse earlier stages' outputs).
"""

from __future__ import annotations

import argparse
import contextlib
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
LOGS = RUN / "logs"
# the terminal as it was when the demo started; stages write to their log while this stays free
_TERM = os.fdopen(os.dup(1), "w", buffering=1)


def say(text: str = "") -> None:
    """A line of the demo's own report (on the terminal even while a stage's output is captured)."""
    _TERM.write(text + "\n")
    _TERM.flush()


@contextlib.contextmanager
def captured(log: Path, verbose: bool = False):
    """Send file descriptors 1 and 2 to ``log`` while the block runs. At the descriptor level, so
    Ray's C++ core, its threads and subprocesses, warnings and progress bars all land there too."""
    if verbose:
        yield
        return
    log.parent.mkdir(parents=True, exist_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    saved = (os.dup(1), os.dup(2))
    fh = log.open("ab")
    os.dup2(fh.fileno(), 1)
    os.dup2(fh.fileno(), 2)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)
        fh.close()


def _tail(log: Path, lines: int = 25) -> str:
    if not log.is_file():
        return ""
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def _banner(i: int, title: str) -> float:
    say(f"\n== {i}/{len(STAGES)} {title} ==")
    return time.perf_counter()


def stage_synthetic(scenes: int) -> None:
    from pipelines.synthetic import SyntheticJobConfig, main

    res = main(SyntheticJobConfig(num_scenes=scenes, out_dir=str(RUN / "synthetic")))
    st = res.stats
    say(f"  {st['images']} scenes, {st['relations']} stated relations over {st['distinct_predicates']} predicates "
        f"({res.scenes_per_s:.0f} scenes/s)")
    say(f"  corpus and statistics: {res.out_dir} (synthetic_stats.json)")


def stage_annotate() -> None:
    from pipelines.annotate import AnnotateConfig, main
    from relate.config import load_config

    cfg = load_config(AnnotateConfig, ROOT / "pipelines/configs/annotate_synthetic.yaml",
                      [f"input_dir={RUN / 'synthetic'}", f"out_dir={RUN / 'annotated'}"])
    res = main(cfg)
    st = res.stats
    failed = 0 if res.failures is None else res.failures.num_rows
    say(f"  {st['images']} images, {st['relations']} relations kept by the gate ({100 * st['rejected_share']:.1f}% "
        f"of {st['candidates']} candidates rejected); VLM calls failed {failed}")
    say(f"  corpus: {res.out_dir}; full report: {Path(res.out_dir) / 'stats' / 'annotation_stats.json'} "
        f"and {LOGS / 'annotate.log'}")


def _follow(path: Path, done: threading.Event) -> None:
    """Say lines appended to ``path`` until ``done`` is set (and once more after)."""
    pos = 0
    while True:
        finished = done.wait(2.0)
        if path.is_file():
            with path.open() as fh:
                fh.seek(pos)
                for line in fh:
                    if line.lstrip().startswith("step "):  # progress; validation lines stay in the file
                        say("  " + line.rstrip())
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
        say(f"  previous demo run finished: training {run_dir} afresh")
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
    link = RUN / "checkpoint"  # a stable name for the README's commands
    link.unlink(missing_ok=True)
    link.symlink_to(os.path.relpath(res.checkpoint, RUN), target_is_directory=True)
    t = res.test
    fams = sorted(k.split("/")[-1][:-3] for k in t if k.startswith("model/truth/family/") and k.endswith("_ap"))
    if fams:
        # what the model knows against what it was told: the share of each family's truth the
        # annotated training split states (train_jobs.learning_curve.source_coverage)
        from train_jobs.learning_curve import source_coverage

        with captured(LOGS / "train.log"):
            told = source_coverage(str(RUN / "annotated"), str(RUN / "synthetic"))
        say("  test split, AP against every relation that holds (in brackets: the share of it the annotation states):")
        say("    " + ", ".join(f"{f} {t[f'model/truth/family/{f}_ap']:.2f} ({told.get(f, {}).get('covered', float('nan')):.0%})"
                            for f in fams))
        say(f"  top-10 precision {t.get('model/truth/top10_precision', float('nan')):.2f}; "
            f"mR@50 of the stated relations {t.get('model/syn_nogc/mR@50', float('nan')):.2f} "
            f"(frequency baseline {t.get('baseline/syn_nogc/mR@50', float('nan')):.2f})")
    say(f"  checkpoint: {res.checkpoint} (linked as {link})")
    say(f"  full test report: {run_dir / 'test_report.txt'}; progress: {progress}")
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

    # = python -m eval_jobs.prepare synthetic --root runs/demo/synthetic --out runs/demo/prepared: the files
    # ovsgg_synthetic.yaml reads, as it reads the training split below and the checkpoint LATEST names
    prepare_synthetic(RUN / "synthetic", RUN / "prepared")
    pq.write_table(read_corpus(RUN / "annotated", "train"), RUN / "ovsgg_train_corpus.parquet")
    result = main(load_config(OVSGGConfig, ROOT / "eval_jobs/configs/ovsgg_synthetic.yaml", [f"out_dir={RUN / 'ovsgg'}"]))
    for name, sysres in result["systems"].items():
        comp = sysres.get("composite") or {}
        ovs, weak = comp.get("ovs"), comp.get("weakest_axis")
        say(f"  {name}: OVS {100 * ovs:.1f}, weakest axis {weak}" if ovs is not None else f"  {name}: no OVS")
    say(f"  table: {RUN / 'ovsgg' / 'table.md'}; radar: {RUN / 'ovsgg' / 'radar.png'}")


def stage_serve() -> None:
    from scripts.serve_demo import run

    result = run(checkpoint=_checkpoint(), out_dir=RUN / "serve")
    labels = result.get("region_labels") or []
    say(f"  POST /v1/relations: {len(result['triplets'])} triplets from {result['vocabulary_size']} predicates; "
        "the best five:")
    for t in result["triplets"][:5]:
        name = lambda i: f"{i + 1}:{labels[i]}" if i < len(labels) else str(i + 1)  # noqa: E731
        say(f"    {name(t['subject']):<12} {t['predicate']:<20} {name(t['object']):<12} {t['score']:.3f}")
    say(f"  response and rendered graph: {RUN / 'serve' / 'graph.json'}, {RUN / 'serve' / 'graph.png'}")


def stage_probe() -> None:
    from eval_jobs.triplet_probe import TripletProbeConfig, main
    from relate.config import load_config

    res = main(load_config(TripletProbeConfig, ROOT / "eval_jobs/configs/triplet_probe_synthetic.yaml",
                           [f"output_dir={RUN / 'triplet_probe'}"]))
    say(f"  {res.n_triplets} triplets of {res.benchmark}: " + ", ".join(
        f"{name} {100 * m['scores']['overall']:.1f}%" for name, m in res.models.items()))
    say(f"  report: {RUN / 'triplet_probe'}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenes", type=int, default=2000, help="synthetic scenes to build")
    ap.add_argument("--steps", type=int, default=150, help="training steps of the cpu_small recipe")
    ap.add_argument("--only", nargs="*", choices=STAGES, default=list(STAGES), help="stages to run")
    ap.add_argument("--verbose", action="store_true", help="show every stage's full output instead of logging it")
    args = ap.parse_args(argv)
    os.chdir(ROOT)  # the shipped configs' relative paths (runs/demo/...) are the repository's, wherever this starts

    with captured(LOGS / "ray.log", args.verbose):
        import ray

        ray.init(include_dashboard=False, configure_logging=False, log_to_driver=False)
        ray.data.DataContext.get_current().enable_progress_bars = False
    say(f"Ray started; each stage's full output goes to {LOGS}/<stage>.log")
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
            log = LOGS / f"{name}.log"
            log.unlink(missing_ok=True)
            try:
                with captured(log, args.verbose):
                    runners[name]()
            except BaseException:
                if not args.verbose:
                    say(f"-- {name} FAILED; the end of {log}:\n{_tail(log)}")
                raise
            say(f"-- {name} done in {time.perf_counter() - t0:.0f} s")
    with captured(LOGS / "ray.log", args.verbose):
        ray.shutdown()
    say(f"\nall stages done in {time.perf_counter() - t_all:.0f} s; outputs under {RUN}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
