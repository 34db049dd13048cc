"""Train the relation model with Ray Train (DDP; gloo on CPU, nccl on GPU) on a corpus in Parquet.

Ray Data streams the corpus, decoding and resizing images and applying photometric jitter in
the pipeline (never flips: they falsify left/right, Table 14). One stream covers the whole run,
each epoch a new permutation of the rows from ``run.seed`` (``train_dataset``). Each step draws
one multi-scale rung. AMP on GPU, EMA weights, backbone lr below the head's, a checkpoint folder
every ``checkpoint_every`` steps (the same folder format ``relate.api.load_model`` reads),
resumption from the latest one after a worker failure (FailureConfig) or with ``--resume``, the
stream starting at the rows of the restored step (``ResumableStream``), metrics to Ray Train at
the log, validation and checkpoint steps and to TensorBoard every step (``train_jobs.relation_worker``).

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

from relate.config import parse_job_args
from relate.jobinfo import run_name
from relate.data.corpus import require_corpus
from relate.job_inputs import MAKE_WORLD, require_path
from relate.placement import scaling_config_kwargs
from relate.storage import is_uri, join, redact, resolve, uri_for
from train_jobs import run_files
from train_jobs.relation_config import OptimConfig, RunSettings, TrainRelationConfig
from train_jobs.relation_data import DecodeStage, build_space, dropped_by_caps, epoch_order, training_table
from train_jobs.relation_worker import train_loop_per_worker
from train_jobs.run_files import PROGRESS_LOG, RunError, RunState, new_run_name

__all__ = ["OptimConfig", "RunSettings", "TrainRelationConfig", "TrainRelationResult", "build_trainer", "train_dataset",
           "decode_stage_kwargs", "ResumableStream", "main",
           "resolve_storage_path", "progress_file", "RunError", "RunState", "new_run_name", "plan_run", "parse_args"]


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


def decode_stage_kwargs(cfg: TrainRelationConfig, table, space: dict) -> dict:
    """``DecodeStage``'s arguments for this run's row table (what the stream and its decode cache share)."""
    return dict(size=cfg.model.backbone.img_size, data=cfg.data, forms=space["forms"], categories=space["categories"],
                seed=cfg.run.seed, sources=space["sources"], keep_aspect=cfg.model.backbone.keep_aspect, rows=table)


def train_dataset(cfg: TrainRelationConfig, table, space: dict, total_steps: int, start_step: int = 0, cache=None):
    """The training stream: every row index the run's steps from ``start_step`` to ``total_steps`` need
    (``epoch_order``: one permutation of the row table an epoch, from ``run.seed``), in blocks of
    ``data.block_rows``, decoded by ``DecodeStage`` from the row table it holds, or read from the
    decode cache ``cache`` (``train_jobs.decode_cache.DecodedRows``, built by ``build_trainer``).

    One stream for the whole run, not one execution an epoch: each execution of a Ray Data dataset
    starts its pipeline again (a new decode actor, its imports, its first block), and with the row table
    as one block an epoch's first batch also waited for a full 128 MiB output block (about 3,700 of
    cpu_long's 96 px images). That was 20-28 s at each of cpu_long's nine epoch starts, and every epoch
    had repeated the same batches in the same order. A run resumed at step k starts the same order at
    the rows of step k (``ResumableStream``).
    """
    import math

    import ray

    from train_jobs.stream_pacing import paced

    per_step = cfg.optim.batch_size * cfg.run.num_workers
    order = epoch_order(len(table), math.ceil(total_steps * per_step / max(len(table), 1)), cfg.run.seed)
    order = order[min(max(start_step, 0) * per_step, len(order)):]
    # Built where it is called, with no Ray task: Ray Train calls this in its controller once the
    # workers hold their CPUs, and from_arrow's metadata tasks (1 CPU each) then never get one
    # (cpu_long's two 0.75-CPU workers leave 0.5 of 2). from_items reads its blocks' metadata itself.
    ds = ray.data.from_items([{"row": int(i)} for i in order],
                             override_num_blocks=max(1, math.ceil(len(order) / cfg.data.block_rows)))
    ds.set_name(f"{run_name('train', cfg.run.name)}-data")  # the Ray Data dashboard's name for the input stream
    stage_kwargs = {**decode_stage_kwargs(cfg, table, space), "cache": cache}
    # paced: once the queued blocks fill the object store budget, Ray 2.60's executor loop would spin
    # on a core until the trainer reads (train_jobs/stream_pacing.py)
    return paced(ds.map_batches(DecodeStage, fn_constructor_kwargs=stage_kwargs, batch_format="pyarrow",
                                batch_size=cfg.optim.batch_size,
                                compute=ray.data.ActorPoolStrategy(size=cfg.data.decode_concurrency),
                                num_cpus=cfg.data.decode_cpus))


@dataclass
class ResumableStream:
    """The ``train`` dataset given to Ray Train as a factory, which Ray Train calls each time it starts
    the worker group: at the first start, and again after a worker failure, when the workers restore
    the latest checkpoint. Each call starts the stream at the rows of that checkpoint's step (Ray
    Train's record of it in the run folder, ``run_files.latest_step``), so a restarted run neither
    trains its first rows again nor leaves its last ones out; a new run starts at step 0."""

    cfg: TrainRelationConfig
    table: object
    space: dict
    total_steps: int
    storage: str
    cache: object = None  # the decode cache (data.decode_cache): a train_jobs.decode_cache.DecodedRows

    def __call__(self):
        start = run_files.latest_step(self.storage, self.cfg.run.name)
        return train_dataset(self.cfg, self.table, self.space, self.total_steps, start_step=start, cache=self.cache)


def build_trainer(cfg: TrainRelationConfig):
    """An unstarted TorchTrainer over the corpus (plus the driver-side predicate space)."""
    import ray
    import ray.train
    from ray.train.torch import TorchConfig, TorchTrainer

    space = build_space(cfg.data, cfg.model.text_dim)
    # the (small) row table is read and schema-validated once; the heavy work, image decoding,
    # streams through Ray Data. Read tasks would compete with the trainers for the same CPUs.
    table = training_table(cfg.data, quiet=True).select(["image_id", "uri", "width", "height", "boxes",
                                                         "relations", "source", "asked_pairs"])
    dropped, total, images = dropped_by_caps(table, cfg.data)
    if dropped:
        print(f"data caps: {dropped} of {total} training relations ({images} images) are beyond data.max_boxes="
              f"{cfg.data.max_boxes} or data.max_relations={cfg.data.max_relations} and are not trained on; raise "
              f"them to keep every relation", flush=True)
    per_step = cfg.optim.batch_size * cfg.run.num_workers
    total = cfg.optim.max_steps or cfg.optim.epochs * max(1, space["n_train"] // per_step)
    storage = resolve_storage_path(cfg.run.storage_path)
    cache = None
    if cfg.data.decode_cache:  # decode every row once now, while the trainer does not yet hold the cores
        from train_jobs.decode_cache import ensure_decode_cache

        cache = ensure_decode_cache(decode_stage_kwargs(cfg, table, space), cfg.data.cache_dir)
    stream = ResumableStream(cfg, table, space, int(total), storage, cache)
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
        run_config=run_config, datasets={"train": stream})


def _absolute_data_paths(cfg: TrainRelationConfig) -> TrainRelationConfig:
    """The data folders as absolute paths: Ray Train runs its workers and controller in folders of
    their own, where a path relative to the directory the job started in names nothing."""
    def absolute(path: str | None) -> str | None:
        return path if path is None or is_uri(path) or Path(path).is_absolute() else str(Path(path).resolve())

    update = {"corpus_root": absolute(cfg.data.corpus_root), "truth_root": absolute(cfg.data.truth_root)}
    if cfg.data.cooccurrence not in ("estimate", "off"):
        update["cooccurrence"] = absolute(cfg.data.cooccurrence)
    return cfg.model_copy(update={"data": cfg.data.model_copy(update=update)})


def main(cfg: TrainRelationConfig) -> TrainRelationResult:
    """Train, then (optionally) evaluate the final checkpoint and the frequency baseline on test."""
    from pyarrow import fs as pafs

    from train_jobs.local_ray import init_ray

    require_corpus(cfg.data.corpus_root, "training corpus (data.corpus_root)", splits=["train"])
    # the loop validates every run.val_every steps and always at the last one: refused now, not after training
    require_corpus(cfg.data.corpus_root, "validation split of the training corpus (data.corpus_root, scored "
                   "every run.val_every steps and at the last step)", splits=["val"])
    if cfg.run.evaluate_test:
        require_corpus(cfg.data.corpus_root, "test split of the training corpus (data.corpus_root, scored after "
                       "training; run.evaluate_test=false skips it)", splits=["test"])
    if cfg.data.truth_root is not None:
        require_path(cfg.data.truth_root, "synthetic world (data.truth_root)", MAKE_WORLD)
    cfg = _absolute_data_paths(cfg)
    state = plan_run(cfg)
    cfg = cfg.model_copy(update={"run": cfg.run.model_copy(update={"name": state.name, "unique_name": False})})
    init_ray()  # the cluster RAY_ADDRESS names, or a local instance (train_jobs.local_ray)
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
