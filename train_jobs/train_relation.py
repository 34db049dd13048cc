"""Train the relation model with Ray Train (DDP; gloo on CPU, nccl on GPU) on a corpus in Parquet.

Ray Data streams the corpus, decoding and resizing images and applying photometric jitter in
the pipeline (never flips: they falsify left/right, Table 14). Each step draws one multi-scale
rung. AMP on GPU, EMA weights, backbone lr below the head's, a checkpoint folder every
``checkpoint_every`` steps (the same folder format ``relate.api.load_model`` reads), resumption
from the latest one after a worker failure (FailureConfig), metrics reported every step.

    python -m train_jobs.train_relation --config train_jobs/configs/cpu_small.yaml \
        --set data.corpus_root=/tmp/synth
    python -m train_jobs.train_relation --config ... --resume cpu_small-20261201-041200-3fa9c1

Runs: each new run gets its own folder under ``run.storage_path``, ``<run.name>-<UTC time>-<6 hex>``
(``run.unique_name``), so a rerun never finds, and never silently returns, an earlier run's
checkpoint. Resuming is explicit: ``--resume RUN`` (= ``--set run.name=RUN --set run.resume=true``)
continues the run in that folder from its latest checkpoint and says from which step; a run that
already reached its last step is refused. With ``run.unique_name=false`` the folder is ``run.name``
as given, and an existing one is an error unless resuming.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import Field, model_validator

from relate.config import StrictConfig, parse_job_args
from relate.jobinfo import run_name
from relate.losses import LossConfig
from relate.model.config import RelationModelConfig
from relate.placement import ResourcesConfig, scaling_config_kwargs
from relate.storage import Location, is_uri, join, redact, resolve, uri_for
from train_jobs import run_files
from train_jobs.relation_data import DataConfig, DecodeStage, build_space, dropped_by_caps
from train_jobs.relation_worker import train_loop_per_worker
from train_jobs.run_files import PROGRESS_LOG, RunError, RunState, new_run_name

__all__ = ["OptimConfig", "RunSettings", "TrainRelationConfig", "TrainRelationResult", "build_trainer", "main",
           "resolve_storage_path", "progress_file", "RunError", "RunState", "new_run_name", "plan_run", "parse_args"]


class OptimConfig(StrictConfig):
    lr_head: float = Field(4e-4, gt=0, description="head learning rate (Table 14: 4e-4)")
    lr_backbone: float = Field(5e-5, ge=0, description="backbone learning rate (Table 14: 5e-5, 8x below)")
    weight_decay: float = Field(0.05, ge=0, description="AdamW weight decay")
    warmup_steps: int = Field(50, ge=0, description="linear warm-up steps before the cosine decay")
    epochs: int = Field(12, ge=1, description="passes over the training split (Table 14: 12)")
    max_steps: int | None = Field(None, gt=0, description="stop after this many optimiser steps (overrides epochs)")
    batch_size: int = Field(32, gt=0, description="images per worker per step (Table 14: 32 per GPU)")
    grad_clip: float = Field(1.0, gt=0, description="gradient norm clip")
    ema: float = Field(0.9998, ge=0, lt=1, description="EMA decay (Table 14: 0.9998); warmed up as (1+t)/(10+t)")
    amp: bool = Field(True, description="bfloat16 autocast on GPU (ignored on CPU)")


class RunSettings(StrictConfig):
    name: str = Field("relation", description="run name: a new run's folder under storage_path is "
                      "<name>-<UTC time>-<6 hex> (see unique_name); with resume, the folder of the run to continue")
    unique_name: bool = Field(True, description="give a new run its own folder, <name>-<UTC time>-<6 hex>; false "
                              "uses name as is, and an existing folder of that name is an error unless resume")
    resume: bool = Field(False, description="continue the run in <storage_path>/<name> from its latest checkpoint "
                         "(what --resume RUN sets); refused when it has no checkpoint or already reached its last step")
    storage_path: Location = Field("runs/ray_train", description="RunConfig storage for checkpoints, progress.log and "
                              "results: a local (on a cluster: shared) folder, resolved to an absolute path, or a "
                              "pyarrow.fs URI passed to Ray as is (s3://bucket/runs, gs://bucket/runs; an "
                              "S3-compatible endpoint as s3://bucket/runs?endpoint_override=host:9000&scheme=http). "
                              "Credentials come "
                              "from each node's default chain (AWS_* variables, instance role) or inline as "
                              "s3://KEY:SECRET@bucket/...; printed and returned locations drop inline credentials "
                              "(relate.storage)")
    num_workers: int = Field(2, ge=1, description="DDP workers")
    worker: ResourcesConfig = Field(default_factory=lambda: ResourcesConfig(num_cpus=0.75),
                                    description="what each DDP worker reserves: num_gpus > 0 means one GPU each and nccl "
                                                "(gloo otherwise), custom resources such as {trainer: 1} pin workers to "
                                                "the training node group; on CPU leave some CPUs for Ray Data")
    checkpoint_every: int = Field(50, gt=0, description="steps between checkpoints")
    keep_checkpoints: int = Field(2, ge=1, description="checkpoints kept in storage")
    max_failures: int = Field(2, ge=0, description="worker-group restarts allowed (FailureConfig)")
    seed: int = Field(0, description="seed for weights, rungs and augmentation")
    val_every: int = Field(0, ge=0, description="validate every N steps on rank 0 (0: only at the end)")
    val_images: int = Field(100, gt=0, description="validation images scored in the loop")
    evaluate_test: bool = Field(True, description="after training, score the test split and the frequency baseline")
    calibrate: bool = Field(True, description="after training, fit Platt (a, b) of Eq. 6 on the val split and install "
                            "it in the final checkpoint (train_jobs.calibrate; a checkpoint at a URI is fitted on a "
                            "temporary copy and its calibration.json written back)")
    log_every: int = Field(10, gt=0, description="rank-0 console log interval in steps")
    log_reports: bool = Field(False, description="keep Ray Train's own 'Reporting training result ...' line, "
                              "logged by every worker at every step (off: the job log carries our step lines)")
    kill_worker_at_step: int | None = Field(None, gt=0, description="fault drill: the last rank SIGKILLs itself once at this step")

    @model_validator(mode="after")
    def _check(self) -> "RunSettings":
        if self.worker.num_gpus not in (0, 1):
            raise ValueError(f"run.worker.num_gpus={self.worker.num_gpus}: a DDP worker takes no GPU or exactly one")
        return self


class TrainRelationConfig(StrictConfig):
    model: RelationModelConfig = Field(default_factory=RelationModelConfig, description="architecture")
    loss: LossConfig = Field(default_factory=LossConfig, description="objective weights (Table 14)")
    data: DataConfig = Field(default_factory=DataConfig, description="corpus, vocabulary and input pipeline")
    optim: OptimConfig = Field(default_factory=OptimConfig, description="optimiser and schedule")
    run: RunSettings = Field(default_factory=RunSettings, description="Ray Train run settings")


@dataclass
class TrainRelationResult:
    checkpoint: str | None
    run: str = ""  # the run's folder name under storage_path (what --resume takes)
    metrics: dict = field(default_factory=dict)
    test: dict = field(default_factory=dict)
    calibration: dict = field(default_factory=dict)
    seconds: float = 0.0
    checkpoints: list = field(default_factory=list)  # (location, metrics at its step) of each kept checkpoint, by step


def resolve_storage_path(path: str) -> str:
    """A local storage path made absolute (Ray Train requires it); a URI (``s3://``, ``gs://``, ...) as is."""
    if is_uri(path):
        return path
    return str(Path(path).expanduser().resolve())


def progress_file(storage: str, name: str) -> str:
    """Where rank 0 writes its step lines: ``<storage>/<name>/progress.log``, a local path or a URI
    (without inline credentials)."""
    return redact(join(resolve_storage_path(storage), name, PROGRESS_LOG))


def _run_dir(storage: str, name: str):
    """(pyarrow filesystem, run folder on it): what the workers write progress.log and the drill marker to."""
    fs, root = resolve(storage)
    return fs, f"{root.rstrip('/')}/{name}"


def plan_run(cfg: TrainRelationConfig) -> RunState:
    """Which run folder this invocation trains in (train_jobs.run_files.plan_run)."""
    return run_files.plan_run(resolve_storage_path(cfg.run.storage_path), cfg.run.name, resume=cfg.run.resume,
                              unique=cfg.run.unique_name)


def build_trainer(cfg: TrainRelationConfig):
    """An unstarted TorchTrainer over the corpus (plus the driver-side predicate space)."""
    import ray
    import ray.train
    from ray.train.torch import TorchConfig, TorchTrainer

    from relate.data.corpus import read_corpus

    space = build_space(cfg.data, cfg.model.text_dim)
    # the (small) row table is read and schema-validated once; the heavy work, image decoding,
    # streams through Ray Data. Read tasks would compete with the trainers for the same CPUs.
    table = read_corpus(cfg.data.corpus_root, "train").select(["image_id", "uri", "width", "height", "boxes",
                                                                "relations", "source"])
    dropped, total, images = dropped_by_caps(table, cfg.data)
    if dropped:
        print(f"data caps: {dropped} of {total} training relations ({images} images) are beyond data.max_boxes="
              f"{cfg.data.max_boxes} or data.max_relations={cfg.data.max_relations} and are not trained on; raise "
              f"them to keep every relation", flush=True)
    ds = ray.data.from_arrow(table)
    ds.set_name(f"{run_name('train', cfg.run.name)}-data")  # the Ray Data dashboard's name for the input stream
    stage_kwargs = dict(size=cfg.model.backbone.img_size, data=cfg.data,
                        forms=space["forms"], categories=space["categories"], seed=cfg.run.seed,
                        sources=space["sources"])
    ds = ds.map_batches(DecodeStage, fn_constructor_kwargs=stage_kwargs, batch_format="pyarrow",
                        batch_size=cfg.optim.batch_size,
                        compute=ray.data.ActorPoolStrategy(size=cfg.data.decode_concurrency),
                        num_cpus=cfg.data.decode_cpus)
    per_step = cfg.optim.batch_size * cfg.run.num_workers
    total = cfg.optim.max_steps or cfg.optim.epochs * max(1, space["n_train"] // per_step)
    storage = resolve_storage_path(cfg.run.storage_path)
    if cfg.run.resume:
        run_files.refuse_finished(storage, cfg.run.name, int(total))
    run_config = ray.train.RunConfig(
        name=cfg.run.name, storage_path=storage,
        failure_config=ray.train.FailureConfig(max_failures=cfg.run.max_failures),
        checkpoint_config=ray.train.CheckpointConfig(num_to_keep=cfg.run.keep_checkpoints))
    loop_cfg = {"cfg": cfg.model_dump(mode="json"), "space": space, "total_steps": int(total),
                "run_dir": _run_dir(storage, cfg.run.name)}
    scaling = scaling_config_kwargs(cfg.run.worker, cfg.run.num_workers)
    return TorchTrainer(
        train_loop_per_worker, train_loop_config=loop_cfg,
        scaling_config=ray.train.ScalingConfig(**scaling),
        torch_config=TorchConfig(backend="nccl" if scaling["use_gpu"] else "gloo"),
        run_config=run_config, datasets={"train": ds})


def main(cfg: TrainRelationConfig) -> TrainRelationResult:
    """Train, then (optionally) evaluate the final checkpoint and the frequency baseline on test."""
    import ray
    from pyarrow import fs as pafs

    state = plan_run(cfg)
    cfg = cfg.model_copy(update={"run": cfg.run.model_copy(update={"name": state.name, "unique_name": False})})
    if not ray.is_initialized():
        ray.init(include_dashboard=False, configure_logging=False)
    t0 = time.perf_counter()
    trainer = build_trainer(cfg)  # refuses to resume a run that already reached its last step
    if state.step is None:
        print(f"new run {state.name}: {state.folder}", flush=True)
    else:
        print(f"resuming run {state.name} from step {state.step} (checkpoint {state.checkpoint})", flush=True)
    result = trainer.fit()
    ckpt = result.checkpoint
    # a checkpoint on an object store is a path on Ray's filesystem object (which holds the resolved
    # endpoint and credentials): read it through that object, report it as a URI of storage_path's form
    remote = ckpt is not None and not isinstance(ckpt.filesystem, pafs.LocalFileSystem)
    fs = ckpt.filesystem if remote else None
    out = TrainRelationResult(None if ckpt is None else (uri_for(cfg.run.storage_path, ckpt.path) if remote
                                                          else ckpt.path), state.name, dict(result.metrics or {}))
    kept = getattr(result, "best_checkpoints", None) or []  # (Checkpoint, metrics) of each kept checkpoint
    out.checkpoints = sorted(((uri_for(cfg.run.storage_path, c.path) if remote else c.path, dict(m or {}))
                              for c, m in kept), key=lambda cm: cm[1].get("step", 0))
    if cfg.run.calibrate and ckpt is not None:
        from train_jobs.calibrate import calibrate_checkpoint

        try:  # a failed fit leaves the checkpoint uncalibrated (thresholds refused); the run stands
            out.calibration = calibrate_checkpoint(ckpt.path, cfg.data, split="val", filesystem=fs,
                                                   name=out.checkpoint)
        except (ValueError, OSError) as exc:
            print(f"calibration not installed in {out.checkpoint}: {exc}", flush=True)
    if cfg.run.evaluate_test and ckpt is not None:
        from relate.api import load_model
        from train_jobs.relation_eval import report_test

        out.test = report_test(load_model(ckpt.path, filesystem=fs), cfg.data)
        _write_report(cfg, out.test)
    out.seconds = time.perf_counter() - t0
    return out


def _write_report(cfg: TrainRelationConfig, figures: dict[str, float]) -> None:
    """Every test figure into the run folder: ``test_report.json`` and ``test_report.txt``."""
    import json

    from train_jobs.relation_eval import format_report

    fs, folder = _run_dir(resolve_storage_path(cfg.run.storage_path), cfg.run.name)
    for name, text in (("test_report.json", json.dumps(figures, indent=1, sort_keys=True)),
                       ("test_report.txt", format_report(figures) + "\n")):
        with fs.open_output_stream(f"{folder}/{name}") as f:
            f.write(text.encode())
    print(f"full test report: {redact(join(resolve_storage_path(cfg.run.storage_path), cfg.run.name, 'test_report.txt'))}",
          flush=True)


def parse_args(argv) -> TrainRelationConfig:
    """``--config FILE``, ``--set KEY=VALUE``... and ``--resume RUN`` (= ``run.name=RUN``, ``run.resume=true``)."""
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--resume", default=None, metavar="RUN")
    known, rest = ap.parse_known_args(list(argv))
    if known.resume:
        rest += ["--set", f"run.name={known.resume}", "--set", "run.resume=true"]
    return parse_job_args(TrainRelationConfig, rest, description=__doc__ or "")


if __name__ == "__main__":
    # Run through the importable module, not __main__: Ray pickles __main__'s functions and classes
    # by value, and a pydantic model rebuilt that way on a worker fails to build its serializer.
    import train_jobs.train_relation as _job

    res = _job.main(_job.parse_args(sys.argv[1:]))
    print(f"run {res.run}: checkpoint {res.checkpoint}  ({res.seconds:.0f} s)")
