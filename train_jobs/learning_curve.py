"""Learning curves against the world's rules: how fast, and how far, the relation model learns each family.

Trains one recipe on each training source for a step budget over several seeds (each a normal
``train_jobs.train_relation`` run under ``<out_dir>/train``, a checkpoint every ``eval_every``
steps) and draws the curves on the validation split: every checkpoint scored against the synthetic
world's full truth (``relate.metrics.truth``: per-family AP, top-10 precision, recall within count;
in parallel Ray tasks), per-family curves against steps and against wall time, Student-t 95%
intervals over seeds kept inside the figures' range [0, 1]. Choices (recipe, steps, fixes) are made
on those curves. Only when every run has trained is each run's final checkpoint scored on the
test split, once and on all of its images: the report, with each figure's mean over seeds and its
95% interval over seeds and images together (``relate.metrics.truth_intervals``), and each
source's paired gap to the first.

    python -m pipelines.synthetic --set out_dir=runs/world                          # (b)'s images
    python -m pipelines.synthetic --set out_dir=runs/world_full --set coverage=full   # (a)
    python -m pipelines.annotate --config pipelines/configs/annotate_synthetic.yaml \\
        --set input_dir=runs/world --set out_dir=runs/world_annotated                 # (b)
    python -m train_jobs.learning_curve --config train_jobs/configs/learning_curve.yaml

Two sources on the same images are what the curves are for (seed 001, § 3.3): ``truth``, trained
on every relation that holds (against 1.0 it is what the model and recipe cost), and ``annotated``,
the corpus annotation gives (against ``truth`` it is what annotation coverage costs). Outputs in
``out_dir``: ``curves.parquet`` (one row per source, seed and checkpoint), ``curves.md`` (the
final step per source on the curves' split, and the report), ``curves.json`` (the same, with the
report under ``report``), ``curves_steps.png`` and ``curves_time.png``. A finished run's curve is
kept in ``<out_dir>/scores/<source>-seed<seed>.json`` and its report cells in
``<source>-seed<seed>-<split>.npz``, so an interrupted job, or one given more seeds, trains and
scores only what is missing. With ``concurrent_runs`` > 1 that many runs train at once, each driven
from its own Ray task, and each is kept as soon as it finishes: on a cluster one run per group of
workers; on a 2-core machine two runs of one worker and one torch thread each
(``run.num_workers=1``, ``run.worker.num_cpus=0.5``, ``run.torch_threads=1``).
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from pydantic import Field, model_validator

from relate.config import StrictConfig, parse_job_args
from relate.storage import Location

__all__ = ["CurveSource", "LearningCurveConfig", "LearningCurveResult", "main", "summarise", "FIGURES",
           "source_coverage", "coverage_table"]

_CONFIGS = Path(__file__).resolve().parent / "configs"
# the figures a curve follows: truth/family/<f>_ap per family (added at run time) and these
FIGURES = ("truth/top10_precision", "truth/count_recall", "truth/pair_coverage")


class CurveSource(StrictConfig):
    """One training corpus of the comparison."""

    name: str = Field(..., pattern=r"^[A-Za-z0-9_.-]+$", description="label of the curves (e.g. truth, annotated)")
    corpus_root: Location = Field(..., description="folder with corpus/<split>/*.parquet to train on")


class LearningCurveConfig(StrictConfig):
    """What is trained, on what, how long, how often it is scored, and where it goes."""

    recipe: str = Field(str(_CONFIGS / "cpu_small.yaml"), description="train_relation config YAML trained on each source")
    overrides: list[str] = Field(default_factory=list, description="dotted overrides for every run")
    sources: list[CurveSource] = Field(..., min_length=1, description="training corpora; the first is the reference "
                                       "the others' gaps are measured against")
    truth_root: Location = Field(..., description="the synthetic world folder (pipelines.synthetic output) whose rules "
                                 "score every checkpoint")
    eval_split: str = Field("val", description="split of truth_root the curves are drawn on: every choice (recipe, "
                            "steps, fixes) is made on it, so it must not be the report split")
    eval_images: int | None = Field(None, gt=0, description="draw the curves on the first N images of eval_split "
                                    "only (None: all); the report always scores its whole split")
    report_split: str | None = Field("test", description="split of truth_root on which each run's final checkpoint is "
                                     "scored once, after every run has trained, on all of its images, with intervals "
                                     "over seeds and images (None: no report)")
    resamples: int = Field(1000, ge=100, description="bootstrap replicates of the report's intervals "
                           "(relate.metrics.truth_intervals)")
    seeds: list[int] = Field([0, 1, 2], min_length=1, description="run seeds (weights, rungs, augmentation)")
    steps: int = Field(600, gt=0, description="optimiser steps of each run")
    eval_every: int = Field(100, gt=0, description="steps between scored checkpoints")
    out_dir: Location = Field("runs/learning_curve", description="where runs, scores, table and plots go")
    score_cpus: float = Field(1.0, gt=0, description="CPUs per checkpoint-scoring Ray task")
    concurrent_runs: int = Field(1, ge=1, description="runs trained at once, each driven from its own Ray task; "
                                 "1 trains them one after another in this process. Refused up front when that "
                                 "many runs' Ray Train workers would leave their input pipelines no CPU")

    @model_validator(mode="after")
    def _check(self) -> "LearningCurveConfig":
        names = [s.name for s in self.sources]
        if len(set(names)) != len(names):
            raise ValueError(f"source names must be distinct, got {names}")
        if self.eval_every > self.steps:
            raise ValueError(f"eval_every ({self.eval_every}) exceeds steps ({self.steps})")
        if self.report_split is not None and self.eval_split == self.report_split:
            raise ValueError(f"eval_split and report_split are both {self.eval_split!r}: curves are drawn on the split "
                             "choices are made on, and the report split is scored once, at the end; draw the curves "
                             "on another split (val) or set report_split=null")
        return self


@dataclass
class LearningCurveResult:
    rows: list[dict]
    summary: dict
    out_dir: str


def _run_overrides(cfg: LearningCurveConfig, source: CurveSource, seed: int) -> list[str]:
    keep = cfg.steps // cfg.eval_every + 2
    return [*cfg.overrides, f"data.corpus_root={source.corpus_root}", f"run.seed={seed}",
            f"optim.max_steps={cfg.steps}", f"run.checkpoint_every={cfg.eval_every}", f"run.keep_checkpoints={keep}",
            f"data.truth_root={cfg.truth_root}",  # validation lines against the truth too, whatever the source
            "run.evaluate_test=false", "run.calibrate=false", f"run.storage_path={Path(cfg.out_dir) / 'train'}",
            f"run.name={source.name}-seed{seed}", "run.unique_name=true"]


def _score_checkpoint(path: str, truth_root: str, split: str, limit: int | None,
                      kit_path: str | None = None) -> dict[str, float]:
    """A checkpoint's truth figures on ``split`` (its first ``limit`` images); with ``kit_path``, its
    cells saved there for the report's intervals (relate.metrics.truth_intervals)."""
    from relate.api import load_model
    from relate.metrics.truth_intervals import save_kit
    from train_jobs.relation_eval import score_truth_split

    figs, kit = score_truth_split(load_model(path), truth_root, split, limit)
    if kit_path is not None:
        save_kit(kit, kit_path)
    return figs


def _run_scoring(jobs: Sequence[tuple], cpus: float) -> list[dict[str, float]]:
    """Score checkpoints in parallel Ray tasks: each job is ``_score_checkpoint``'s arguments."""
    import ray

    score = ray.remote(num_cpus=cpus)(_score_checkpoint)
    return ray.get([score.remote(*job) for job in jobs])


def _train_and_score(cfg: LearningCurveConfig, source: CurveSource, seed: int) -> list[dict]:
    """Train one run and draw its curve: every checkpoint scored on ``eval_split`` (never the report split)."""
    from relate.config import load_config
    from train_jobs.train_relation import TrainRelationConfig, main as train

    res = train(load_config(TrainRelationConfig, cfg.recipe, _run_overrides(cfg, source, seed)))
    figs = _run_scoring([(path, cfg.truth_root, cfg.eval_split, cfg.eval_images) for path, _ in res.checkpoints],
                        cfg.score_cpus)
    return [{"source": source.name, "seed": seed, "step": int(m["step"]), "split": cfg.eval_split,
             "seconds": float(m.get("train_seconds", float("nan"))), "run": res.run, "checkpoint": str(path), **f}
            for (path, m), f in zip(res.checkpoints, figs)]


def _require_inputs(cfg: LearningCurveConfig, missing: Sequence[tuple]) -> None:
    """Every corpus a missing run trains on, and the world that scores it, exist: refused here, before
    Ray starts and any run trains, not when the first run that reads a missing one starts (after the
    runs before it, tens of minutes each)."""
    from relate.data.corpus import require_corpus
    from relate.job_inputs import MAKE_WORLD, require_path

    if not missing:
        return
    require_path(cfg.truth_root, "synthetic world (truth_root) that scores every checkpoint", MAKE_WORLD)
    for source in dict.fromkeys(entry[0].corpus_root for entry in missing):
        for split in ("train", "val"):  # what each run trains on, and validates on every run.val_every steps
            require_corpus(source, f"{split} split of a source's corpus (sources[].corpus_root)", splits=[split])


def _timed_run(cfg: LearningCurveConfig, source: CurveSource, seed: int, cwd: str) -> list[dict]:
    """``_train_and_score`` from ``cwd`` (a Ray task's relative paths mean what they meant in the
    driver), each row stamped with the run's start and end (epoch seconds)."""
    import os
    import time

    os.chdir(cwd)
    start = time.time()
    rows = _train_and_score(cfg, source, seed)
    return [{**r, "run_started": start, "run_ended": time.time()} for r in rows]


def worker_cpus_of_run(cfg: LearningCurveConfig) -> float:
    """The CPUs one run's Ray Train workers reserve (``run.num_workers`` x ``run.worker.num_cpus``)."""
    from relate.config import load_config
    from train_jobs.train_relation import TrainRelationConfig

    run = load_config(TrainRelationConfig, cfg.recipe, list(cfg.overrides)).run
    return run.num_workers * (run.worker.num_cpus or 0.0)


def check_concurrency(runs: int, worker_cpus: float, cluster_cpus: float) -> None:
    """``runs`` runs' workers must leave CPU for their input pipelines (each run's Ray Data decode
    actors need a share of a CPU): with none left, Ray Data waits for resources that never free."""
    if runs > 1 and runs * worker_cpus >= cluster_cpus:
        raise ValueError(f"concurrent_runs={runs} runs x {worker_cpus:g} CPU of Ray Train workers each = "
                         f"{runs * worker_cpus:g} of the cluster's {cluster_cpus:g} CPUs: nothing is left for their "
                         "input pipelines (Ray Data), which would wait forever; lower concurrent_runs, "
                         "run.num_workers or run.worker.num_cpus")


def _train_missing(cfg: LearningCurveConfig, missing: Sequence[tuple]):
    """Train every missing run and yield ``(entry, rows)`` as each finishes, so its record is kept at
    once. With ``concurrent_runs`` > 1 up to that many run at a time, each driven from a Ray task;
    a run that fails stops new ones from starting, the others in flight finish and are kept, and the
    failures are raised together, naming each run."""
    import os

    if cfg.concurrent_runs == 1 or len(missing) <= 1:
        for source, seed, *rest in missing:
            print(f"{source.name} seed {seed}: training {cfg.steps} steps on {source.corpus_root}", flush=True)
            yield (source, seed, *rest), _timed_run(cfg, source, seed, os.getcwd())
        return
    import ray

    check_concurrency(min(cfg.concurrent_runs, len(missing)), worker_cpus_of_run(cfg),
                      float(ray.cluster_resources().get("CPU", 0.0)))
    # the task only drives its run: the run's Ray Train workers and scoring tasks ask for the CPUs they use
    drive = ray.remote(num_cpus=0, max_retries=0)(_timed_run)
    queue, pending, failed = list(missing), {}, []
    while queue or pending:
        while queue and not failed and len(pending) < cfg.concurrent_runs:
            entry = queue.pop(0)
            print(f"{entry[0].name} seed {entry[1]}: training {cfg.steps} steps on {entry[0].corpus_root} "
                  f"({len(pending) + 1} of at most {cfg.concurrent_runs} at once)", flush=True)
            pending[drive.remote(cfg, entry[0], entry[1], os.getcwd())] = entry
        if not pending:
            break
        (ref,), _ = ray.wait(list(pending), num_returns=1)
        entry = pending.pop(ref)
        try:
            run_rows = ray.get(ref)
        except Exception as exc:  # noqa: BLE001 - recorded, and raised below once the others have finished
            print(f"{entry[0].name} seed {entry[1]}: failed: {exc}", flush=True)
            failed.append((entry, exc))
            continue
        yield entry, run_rows
    if failed:
        names = ", ".join(f"{e[0].name} seed {e[1]}" for e, _ in failed)
        raise RuntimeError(f"{len(failed)} run(s) failed ({names}); the finished runs are kept in "
                           f"{cfg.out_dir}/scores, and a rerun trains only what is missing") from failed[0][1]


def _report(cfg: LearningCurveConfig, rows: Sequence[dict], out: Path) -> dict:
    """The report: each run's final checkpoint scored once on the whole report split, after every run
    has trained; per source the mean over seeds with its interval over seeds and images, and each
    source's paired gap to the first (same seed, same images, same draws)."""
    from relate.metrics.truth_intervals import load_kit, paired_gap_intervals, seed_image_intervals

    final: dict[tuple[str, int], dict] = {}
    for r in rows:
        k = (r["source"], r["seed"])
        if k not in final or r["step"] > final[k]["step"]:
            final[k] = r
    jobs, where = [], {}
    for (src, seed), r in final.items():
        kit = out / "scores" / f"{src}-seed{seed}-{cfg.report_split}.npz"
        where[(src, seed)] = kit
        tag = kit.with_suffix(".json")
        if not (kit.is_file() and tag.is_file() and json.loads(tag.read_text()).get("checkpoint") == r["checkpoint"]):
            jobs.append(((src, seed), (r["checkpoint"], cfg.truth_root, cfg.report_split, None, str(kit))))
    if jobs:
        print(f"report: scoring {len(jobs)} final checkpoint(s) on the whole {cfg.report_split} split", flush=True)
    for ((src, seed), job), figs in zip(jobs, _run_scoring([j for _, j in jobs], cfg.score_cpus)):
        tmp = where[(src, seed)].with_suffix(".json.tmp")
        tmp.write_text(json.dumps({"checkpoint": job[0], "step": final[(src, seed)]["step"], "figures": figs}))
        tmp.replace(where[(src, seed)].with_suffix(".json"))
    names = list(dict.fromkeys(s for s, _ in final))
    seeds = {src: sorted(seed for s, seed in final if s == src) for src in names}
    kits = {src: [load_kit(where[(src, seed)]) for seed in seeds[src]] for src in names}
    report: dict = {"split": cfg.report_split, "images": next(iter(kits.values()))[0].n_images,
                    "resamples": cfg.resamples, "seeds": seeds, "sources": {}}
    ref = names[0]
    for src in names:
        ivs = {k: v.as_dict() for k, v in seed_image_intervals(kits[src], cfg.resamples).items()}
        if src != ref and seeds[src] == seeds[ref]:
            for k, g in paired_gap_intervals(kits[ref], kits[src], cfg.resamples).items():
                ivs[k].update({"gap": g.mean, "gap_lo": g.low, "gap_hi": g.high})
        report["sources"][src] = ivs
    return report


def report_table(report: dict) -> str:
    """Markdown: per figure, each source's mean [interval over seeds and images] and its gap to the first."""
    srcs = list(report["sources"])
    keys = list(next(iter(report["sources"].values())))
    head = f"Report: {report['split']} split, all {report['images']} images, seeds " + \
        ", ".join(f"{s}: {report['seeds'][s]}" for s in srcs) + \
        f"; mean over seeds [95% interval over seeds and images, {report['resamples']} replicates]"
    lines = [head, "", "| figure | " + " | ".join(srcs) + " |", "|---|" + "---:|" * len(srcs)]
    for k in keys:
        cells = []
        for s in srcs:
            c = report["sources"][s].get(k)
            if c is None or c["mean"] != c["mean"]:
                cells.append("-")
                continue
            txt = f"{c['mean']:.3f} [{c['lo']:.3f}, {c['hi']:.3f}]"
            if "gap" in c:
                txt += f" ({c['gap']:+.3f} [{c['gap_lo']:+.3f}, {c['gap_hi']:+.3f}])"
            cells.append(txt)
        lines.append(f"| {k.replace('family/', '').removesuffix('_ap')} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def source_coverage(corpus_root: str, truth_root: str) -> dict[str, dict[str, float]]:
    """Per family, the share of the truth a source's training split states, and the share of its
    statements that are not true (``relate.metrics.truth.annotation_coverage``)."""
    from relate.data.corpus import read_corpus
    from relate.data.lexicon import CONCEPTS, SURFACE_TO_CONCEPT
    from relate.data.world_truth import world_truth
    from relate.metrics.truth import annotation_coverage

    table = read_corpus(corpus_root, "train")
    truth = world_truth(truth_root, table.column("image_id").to_pylist(), table.column("boxes").to_pylist())
    stated = [{(r["subject"], r["object"], SURFACE_TO_CONCEPT[r["predicate"].strip().lower()]) for r in rels
               if r["predicate"].strip().lower() in SURFACE_TO_CONCEPT and max(r["subject"], r["object"]) < n}
              for rels, (_, n) in zip(table.column("relations").to_pylist(), truth)]
    return annotation_coverage(stated, [t for t, _ in truth], {c: k.family for c, k in CONCEPTS.items()},
                               {c: k.inverse for c, k in CONCEPTS.items()}, [c for c, k in CONCEPTS.items() if k.symmetric])


def coverage_table(coverage: dict[str, dict[str, dict[str, float]]]) -> str:
    """Markdown: per family, each source's share of the truth stated (and of its statements not true)."""
    fams = sorted({f for cov in coverage.values() for f in cov})
    lines = ["| family | " + " | ".join(f"{s}: truth stated (not true)" for s in coverage) + " |",
             "|---|" + "---:|" * len(coverage)]
    for f in fams:
        cells = [f"{c[f]['covered']:.3f} ({c[f]['not_true']:.3f})" if f in c else "-" for c in coverage.values()]
        lines.append(f"| {f} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _figure_keys(rows: Sequence[dict]) -> list[str]:
    fams = sorted({k for r in rows for k in r if k.startswith("truth/family/") and k.endswith("_ap")})
    return fams + [k for k in FIGURES if any(k in r for r in rows)]


def summarise(rows: Sequence[dict], sources: Sequence[str]) -> tuple[dict, str]:
    """Final-step mean [95% interval] per source and figure, and each source's paired gap (same
    seed) to the first source; a Markdown table of it."""
    from train_jobs.ablate_recipe import format_cell, mean_interval

    keys = _figure_keys(rows)
    last = {}
    for r in rows:
        k = (r["source"], r["seed"])
        if k not in last or r["step"] > last[k]["step"]:
            last[k] = r
    summary: dict = {}
    ref = sources[0]
    for src in sources:
        summary[src] = {}
        for key in keys:
            vals = [r[key] for (s, _), r in last.items() if s == src and key in r and not math.isnan(r[key])]
            if not vals:
                continue
            m, lo, hi = mean_interval(vals, within=(0.0, 1.0))
            cell = {"mean": m, "lo": lo, "hi": hi, "n": len(vals)}
            gaps = [r[key] - last[(ref, seed)][key] for (s, seed), r in last.items()
                    if s == src and src != ref and (ref, seed) in last and key in r and key in last[(ref, seed)]]
            if gaps:
                g, glo, ghi = mean_interval(gaps, within=(-1.0, 1.0))
                cell.update({"gap": g, "gap_lo": glo, "gap_hi": ghi})
            summary[src][key] = cell
    names = [k.replace("truth/family/", "").replace("truth/", "") for k in keys]
    lines = ["| source | step | " + " | ".join(names) + " |", "|---|---:|" + "---:|" * len(keys)]
    for src in sources:
        steps = {r["step"] for (s, _), r in last.items() if s == src}
        cells = [format_cell(summary[src].get(key), "gap") for key in keys]
        lines.append(f"| {src} | {','.join(map(str, sorted(steps)))} | " + " | ".join(cells) + " |")
    return summary, "\n".join(lines) + "\n"


def plot_curves(rows: Sequence[dict], sources: Sequence[str], x: str, path: Path, split: str = "val") -> None:
    """One panel per figure: mean over seeds against ``x`` (step or seconds) per source, with the
    95% interval as a band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from train_jobs.ablate_recipe import mean_interval

    keys = _figure_keys(rows)
    cols = 4
    fig, axes = plt.subplots(math.ceil(len(keys) / cols), cols, figsize=(4 * cols, 3 * math.ceil(len(keys) / cols)),
                             squeeze=False)
    for ax, key in zip(axes.ravel(), keys):
        for src in sources:
            by_step: dict[int, list[dict]] = {}
            for r in rows:
                if r["source"] == src and key in r and not math.isnan(r[key]):
                    by_step.setdefault(r["step"], []).append(r)
            steps = sorted(by_step)
            if not steps:
                continue
            xs = [sum(r[x] for r in by_step[s]) / len(by_step[s]) for s in steps]
            stats = [mean_interval([r[key] for r in by_step[s]], within=(0.0, 1.0)) for s in steps]
            ax.plot(xs, [m for m, _, _ in stats], marker="o", label=src)
            if all(not math.isnan(lo) for _, lo, _ in stats):
                ax.fill_between(xs, [lo for _, lo, _ in stats], [hi for _, _, hi in stats], alpha=0.2)
        ax.set_title(key.replace("truth/family/", "AP ").removesuffix("_ap").replace("truth/", ""), fontsize=10)
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("optimiser step" if x == "step" else "wall seconds")
        ax.grid(alpha=0.3)
    for ax in axes.ravel()[len(keys):]:
        ax.axis("off")
    axes[0, 0].legend(fontsize=8)
    fig.suptitle(f"against the world's rules ({split} split)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(cfg: LearningCurveConfig) -> LearningCurveResult:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from relate.config import dump_config
    from train_jobs.local_ray import init_ray

    out = Path(cfg.out_dir)
    (out / "scores").mkdir(parents=True, exist_ok=True)
    dump_config(cfg, out / "learning_curve_config.yaml")
    by_run: dict[tuple[str, int], list[dict]] = {}
    missing: list[tuple[CurveSource, int, Path, list[str]]] = []
    for source in cfg.sources:
        for seed in cfg.seeds:
            kept = out / "scores" / f"{source.name}-seed{seed}.json"
            settings = _run_overrides(cfg, source, seed) + [f"truth_root={cfg.truth_root}", f"split={cfg.eval_split}",
                                                            f"images={cfg.eval_images}", f"recipe={cfg.recipe}"]
            saved = json.loads(kept.read_text()) if kept.is_file() else None
            if saved is not None and saved.get("settings") == settings and all("checkpoint" in r for r in saved["rows"]):
                print(f"{source.name} seed {seed}: kept scores {kept}", flush=True)
                by_run[(source.name, seed)] = saved["rows"]
            else:
                missing.append((source, seed, kept, settings))
    _require_inputs(cfg, missing)  # before Ray starts
    init_ray()  # the cluster RAY_ADDRESS names, or a local instance (train_jobs.local_ray)
    for (source, seed, kept, settings), run_rows in _train_missing(cfg, missing):
        tmp = kept.with_suffix(".tmp")
        tmp.write_text(json.dumps({"settings": settings, "rows": run_rows}, indent=1))
        tmp.replace(kept)  # atomic: a crash never leaves half a record
        by_run[(source.name, seed)] = run_rows
    rows = [r for source in cfg.sources for seed in cfg.seeds for r in by_run[(source.name, seed)]]
    names = [s.name for s in cfg.sources]
    summary, table = summarise(rows, names)
    table = f"Curves: {cfg.eval_split} split" + (f", first {cfg.eval_images} images" if cfg.eval_images else "") + \
        " (final step; Student-t 95% interval over seeds, kept inside [0, 1])\n\n" + table
    if cfg.report_split is not None:  # once, after every run has trained
        summary["report"] = _report(cfg, rows, out)
        table += "\n" + report_table(summary["report"])
    coverage = {s.name: source_coverage(s.corpus_root, cfg.truth_root) for s in cfg.sources}
    summary["coverage"] = coverage
    table += "\nWhat each source states of the truth (training split):\n\n" + coverage_table(coverage)
    pq.write_table(pa.Table.from_pylist(rows), out / "curves.parquet")
    (out / "curves.md").write_text(table)
    (out / "curves.json").write_text(json.dumps(summary, indent=1))
    plot_curves(rows, names, "step", out / "curves_steps.png", cfg.eval_split)
    plot_curves(rows, names, "seconds", out / "curves_time.png", cfg.eval_split)
    print(table, flush=True)
    print(f"curves: {out / 'curves_steps.png'}, {out / 'curves_time.png'}; rows {out / 'curves.parquet'}", flush=True)
    return LearningCurveResult(rows, summary, str(out))


if __name__ == "__main__":
    # through the importable module: Ray pickles __main__'s functions by value (see train_relation)
    import train_jobs.learning_curve as _job

    _job.main(parse_job_args(_job.LearningCurveConfig, sys.argv[1:], description=__doc__ or ""))
