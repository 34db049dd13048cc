"""OV-SGG-Bench: score any number of systems on the six axes in parallel Ray tasks (seed 001, 5-6).

    ray job submit -- python -m eval_jobs.ovsgg --config eval_jobs/configs/ovsgg.yaml

Every system is a set of prediction Parquet files (PREDICTIONS_SCHEMA, one per benchmark), so a
baseline's exported output is scored by exactly the code that scores ours. Stages:

1. read each benchmark from its native layout (one CPU task each);
2. optional inference: ``predict_fn(corpus, vocabulary) -> predictions table`` writes the
   missing Parquet files of one system (GPU-sized tasks); this is where a trained model plugs in;
3. score every (system, benchmark) cell (CPU tasks, ``num_cpus_per_task`` each);
4. chance-correct, combine into OVS with leave-one-axis-out, and write ``results.json``, the
   Table-3-style ``table.md`` and ``radar.png``;
5. under the ``paper`` protocol, ``per_image.parquet`` beside them (PER_IMAGE_SCHEMA): one row per
   (system, benchmark, image, K) of every A1/A4 recall cell, whose ``recall`` averages to the
   cell's R@K (``df[(df.system == s) & (df.benchmark == b) & (df.k == 50)].recall.mean()``) and
   whose ``predicates`` terms give its mR@K (relate.metrics.per_image). ``results.json`` names the
   file under ``per_image`` (null when no cell has rows, e.g. protocol ``sgb``); A3 cells add
   their synonym-tolerant rows (matcher ``synonym``);
6. a bootstrap over images (eval_jobs.intervals): an interval on every cell, axis, the OVS and
   each leave-one-axis-out value, and paired differences between systems, under ``bootstrap`` in
   ``results.json``; every draw in ``bootstrap_draws.parquet`` for eval_jobs.leaderboard.

A3 asks the model to answer from a whole vocabulary (``vocabulary``: the packaged 19,291 strings
by default, or a file) and scores its answers against the benchmark's strings by synonym; MRR and
median rank place the GT string among that vocabulary.

Every recall cell is graph-constrained unless the config says otherwise, and says which it is.
"""

from __future__ import annotations

import importlib
import json
import logging
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from eval_jobs.intervals import bootstrap_systems
from eval_jobs.ovsgg_cells import axis_scores, cell_axis, load_benchmark, score_cell
from eval_jobs.ovsgg_config import BenchmarkSpec, InferenceSpec, OVSGGConfig, SynonymSpec, SystemSpec
from relate.config import dump_config, parse_job_args
from relate.data.readers import BenchmarkData
from relate.jobinfo import Progress, gather, run_name
from relate.job_inputs import MAKE_BENCHMARK, require_checkpoint, require_path
from relate.metrics import composite, leave_one_axis_out
from relate.placement import ResourcesConfig, ray_remote_args
from relate.schema import PER_IMAGE_SCHEMA, to_table

__all__ = ["BenchmarkSpec", "SystemSpec", "InferenceSpec", "SynonymSpec", "OVSGGConfig", "relate_api_predict", "main"]

PredictFn = Callable[[pa.Table, list[str]], pa.Table]
AXES = ("A1", "A2", "A3", "A4", "A5", "A6")
PER_IMAGE_FILE = "per_image.parquet"
DRAWS_FILE = "bootstrap_draws.parquet"
DRAWS_SCHEMA = pa.schema([pa.field("system", pa.string(), nullable=False),
                          pa.field("quantity", pa.string(), nullable=False),
                          pa.field("draws", pa.list_(pa.float64()), nullable=False)])


# --------------------------------------------------------------------------- stage bodies (Ray-free)

def _write_per_image(cells: dict[tuple[str, str], dict], path: Path) -> str | None:
    """Pop every cell's per-image rows into one Parquet file (a ``system`` column added); its name."""
    rows = [{"system": s, **row} for (s, _), c in cells.items() for row in c.pop("_per_image", [])]
    if not rows:
        path.unlink(missing_ok=True)  # no stale rows from an earlier run in the same folder
        return None
    pq.write_table(to_table(rows, PER_IMAGE_SCHEMA, table=path.name), path)
    return path.name


def _load_predict_fn(path: str) -> PredictFn:
    mod, _, fn = path.partition(":")
    if not fn:
        raise ValueError(f"predict_fn must look like 'package.module:function', got {path!r}")
    return getattr(importlib.import_module(mod), fn)


def relate_api_predict(regions: pa.Table, vocabulary: list[str], checkpoint: str | None = None,
                       per_pair: int = 3) -> pa.Table:
    """Default predict_fn: the trained relation model through relate.api (GT or detector boxes),
    each pair's ``per_pair`` best strings of ``vocabulary``."""
    if checkpoint is None:
        raise ValueError("inference.checkpoint is required by the default predict_fn")
    from relate.api import load_model

    return load_model(checkpoint).predict_table(regions, vocabulary, per_pair=per_pair)


def _regions(spec: BenchmarkSpec, bench: BenchmarkData) -> pa.Table:
    """What the model is given: the GT boxes, or for A4 the shared detector's boxes (no labels
    are needed by our model; a baseline may read the detector's categories)."""
    if not spec.detections:
        return bench.corpus
    from relate.schema import CORPUS_SCHEMA, to_table

    det = pq.read_table(spec.detections)
    det = det.append_column("relations", pa.array([[] for _ in range(det.num_rows)],
                                                  type=CORPUS_SCHEMA.field("relations").type))
    ids = set(bench.corpus.column("image_id").to_pylist())
    keep = [i in ids for i in det.column("image_id").to_pylist()]
    return to_table(det.filter(pa.array(keep)), CORPUS_SCHEMA, table=f"detections {spec.detections}")


def _run_inference(spec: BenchmarkSpec, bench: BenchmarkData, predict_fn: PredictFn | str, out: str,
                   checkpoint: str | None = None) -> str:
    import inspect

    fn = _load_predict_fn(predict_fn) if isinstance(predict_fn, str) else predict_fn
    kw: dict[str, Any] = {"checkpoint": checkpoint} if checkpoint is not None else {}
    params = inspect.signature(fn).parameters
    if "per_pair" in params or any(p.kind is p.VAR_KEYWORD for p in params.values()):
        kw["per_pair"] = spec.answers_per_pair()
    table = fn(_regions(spec, bench), spec.answer_vocabulary(bench)[1], **kw)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, out)
    return out


# --------------------------------------------------------------------------- orchestration

class _Stages:
    """Submit stage calls as named Ray tasks (or run them in-process) and gather them with progress lines."""

    def __init__(self, cfg: OVSGGConfig) -> None:
        self.name = run_name("ovsgg", cfg.out_dir)
        self.ray = None
        if not cfg.use_ray:
            return
        import ray

        if not ray.is_initialized():
            ray.init()
        self.ray = ray
        inf = cfg.inference
        if inf and inf.resources.num_gpus > ray.cluster_resources().get("GPU", 0):
            # not an error: an autoscaling cluster adds GPU nodes once the tasks are pending
            logging.getLogger(__name__).warning("inference asks for %s GPU(s) per task; the cluster has %s now",
                                                inf.resources.num_gpus, ray.cluster_resources().get("GPU", 0))
        cpu = ray_remote_args(ResourcesConfig(num_cpus=cfg.num_cpus_per_task))
        self.remote = {"read": ray.remote(**cpu)(load_benchmark), "score": ray.remote(**cpu)(score_cell),
                       "infer": ray.remote(**ray_remote_args(inf.resources if inf else ResourcesConfig()))(_run_inference)}

    def submit(self, stage: str, label: str, *args: Any) -> Any:
        """One call of ``stage``; on Ray a task named ``<run>:<stage>:<label>`` (the dashboard's Tasks view)."""
        if self.ray is None:
            return {"read": load_benchmark, "score": score_cell, "infer": _run_inference}[stage](*args)  # in-process
        return self.remote[stage].options(name=f"{self.name}:{stage}:{label}").remote(*args)

    def gather(self, refs: list, unit: str) -> list:
        """Results in order, printing ``[<run>] <unit> done/total`` as each finishes."""
        progress = Progress(self.name, unit, len(refs))
        if self.ray is None:
            for _ in refs:
                progress.update()
            return list(refs)
        return gather(self.ray, refs, progress)


def _require_inputs(cfg: OVSGGConfig) -> None:
    """Every local file the run reads exists before any work starts (a missing one: one line naming the
    command that makes it)."""
    for b in cfg.benchmarks:
        require_path(b.path, f"benchmark files (benchmarks.{b.name}.path)", MAKE_BENCHMARK)
        if b.detections:
            require_path(b.detections, f"detections (benchmarks.{b.name}.detections)", MAKE_BENCHMARK)
    for s in cfg.systems:
        for name, path in s.predictions.items():
            require_path(path, f"predictions (systems.{s.name}.predictions.{name})",
                         "the system's exported predictions: python -m eval_jobs.convert (docs/jobs/evaluation.md)")
        if s.train_corpus:
            require_path(s.train_corpus, f"training corpus (systems.{s.name}.train_corpus)",
                         "make demo (runs/demo/ovsgg_train_corpus.parquet), or set it to null")
    if cfg.inference is not None and cfg.inference.checkpoint is not None:
        require_checkpoint(cfg.inference.checkpoint, "checkpoint (inference.checkpoint)")


def main(cfg: OVSGGConfig, predict_fn: PredictFn | None = None) -> dict:
    """Run the benchmark; returns the results dict also written to ``out_dir/results.json``."""
    from eval_jobs.report import write_radar, write_table

    _require_inputs(cfg)
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dump_config(cfg, out / "config.yaml")
    a5 = {s.name: s.resolve_a5() for s in cfg.systems}  # a bad judge path fails before any work
    stages = _Stages(cfg)
    benches = {b.name: stages.submit("read", b.name, b, cfg.protocol) for b in cfg.benchmarks}
    specs = {b.name: b for b in cfg.benchmarks}
    preds = {s.name: dict(s.predictions) for s in cfg.systems}
    if cfg.inference is not None:  # stage 2: the only place a model runs
        fn = predict_fn or cfg.inference.predict_fn
        todo = [b for b in specs if b not in preds[cfg.inference.system]]
        paths = [stages.submit("infer", b, specs[b], benches[b], fn, str(out / cfg.inference.out_dir / f"{b}.parquet"),
                               cfg.inference.resolve_checkpoint()) for b in todo]
        preds[cfg.inference.system].update(dict(zip(todo, stages.gather(paths, "inference benchmarks"))))
    train = {s.name: s.train_corpus for s in cfg.systems}
    jobs = {(s, b): stages.submit("score", f"{s}/{b}", specs[b], benches[b], p, cfg, train[s])
            for s, ps in preds.items() for b, p in ps.items()}
    done = dict(zip(jobs, stages.gather(list(jobs.values()), "cells"))) if jobs else {}
    kits = {key: c.pop("_kit") for key, c in done.items() if "_kit" in c}
    per_image = _write_per_image(done, out / PER_IMAGE_FILE)
    systems: dict[str, dict] = {}
    for s in cfg.systems:
        cells = [done[(s.name, b.name)] for b in cfg.benchmarks if (s.name, b.name) in done]
        axes = axis_scores(cells, a5[s.name], cfg.headline_k)
        normed = {a: v["norm"] for a, v in axes.items() if v["norm"] is not None and a != "A3"}
        comp = composite(normed).to_dict() if normed else None
        systems[s.name] = {"cells": {c["benchmark"]: c for c in cells}, "axes": axes, "composite": comp}
    norm = {n: {a: v["norm"] for a, v in r["axes"].items()} for n, r in systems.items() if r["composite"]}
    boot = None
    if kits:
        points = {}
        for key, c in done.items():
            try:
                points[key] = cell_axis(c, cfg.headline_k)
            except ValueError:
                points[key] = (float("nan"), float("nan"))
        boot, draws = bootstrap_systems(kits, systems, points, cfg.bootstrap)
        boot["draws"] = _write_draws(draws, out / DRAWS_FILE)
    else:
        (out / DRAWS_FILE).unlink(missing_ok=True)
    result = {"protocol": {"name": cfg.protocol,
                           "mode": "graph_constrained" if cfg.graph_constrained else "unconstrained",
                           "matcher": cfg.matcher if cfg.protocol == "paper" else "legacy",
                           "headline_k": cfg.headline_k},
              "per_image": per_image,
              "systems": systems, "leave_one_axis_out": leave_one_axis_out(norm) if norm else [],
              "bootstrap": boot}
    (out / "results.json").write_text(json.dumps(result, indent=1, default=_json_default))
    write_table(result, cfg, out / "table.md")
    write_radar(result, out / "radar.png")
    return result


def _write_draws(draws: dict[str, dict[str, np.ndarray]], path: Path) -> str:
    """Every resampled quantity's draws (system, quantity, draws), so eval_jobs.leaderboard can pair
    runs scored on the same images with the same seed draw for draw."""
    rows = [{"system": s, "quantity": q, "draws": v.astype(np.float64).tolist()}
            for s, d in draws.items() for q, v in sorted(d.items())]
    pq.write_table(pa.Table.from_pylist(rows, schema=DRAWS_SCHEMA), path)
    return path.name


def _json_default(x):
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


if __name__ == "__main__":
    # run through the importable module, not __main__, so Ray workers unpickle tasks and configs by reference
    import eval_jobs.ovsgg as _job

    _cfg = parse_job_args(_job.OVSGGConfig, description="OV-SGG-Bench: six axes + OVS composite")
    _job.main(_cfg)
    print((Path(_cfg.out_dir) / "table.md").read_text())
