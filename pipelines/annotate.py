"""Annotate a corpus with VLM passes over numbered markers, gate it, balance it, write it (seed 001, §4).

``python -m pipelines.annotate --config pipelines/configs/annotate_synthetic.yaml`` (or through
``ray job submit``). Ray Data graph per image: read record -> draw markers -> semantic pass ->
grow pass -> spatial pass (each: prompt, generate, parse) -> gate (Algorithm 1, repair,
balance, top-up, dedup). The gate's task spools its rows per shard and, once all of a shard's
images are back, a Ray task per shard balances it and writes it atomically (layout in
:mod:`pipelines.annotate_shards`, the tasks in :mod:`pipelines.annotate_writer`; the driver
only plans, counts summary rows and commits): kept
relations, rejections (including images that could not be read, with the reason), counters and
run statistics; a shard whose VLM calls failed after their retries leaves its failures table
and pending state instead.

The input is a run folder of image records (``input_dir``, with or without relations) or your
own images plus a boxes file (``images``, see :mod:`pipelines.annotate_input`).

Shard membership is fixed by sorted image id, every per-image decision is a pure function of the
image (seeded by its id), so after a crash a rerun processes only the unfinished shards, and
after failed calls a rerun makes exactly those calls again; either way the corpus ends
identical to an uninterrupted, failure-free run. A run that cannot succeed (the VLM is down,
the key is wrong) stops with :class:`AnnotationStopped` after writing what it finished.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)
import pyarrow.parquet as pq
from pydantic import Field, model_validator

from actors.vlm.configs import VLMConfig
from pipelines.annotate_input import ImagesInput, read_records
from pipelines.annotate_shards import (atomic_write, balance_shard, load_pending, read_failures,
                                       shard_paths, write_shard)
from pipelines.annotate_stages import (VLM_PASSES, GateStage, MarkStage, ParseStage, PassesStage, PromptStage,
                                       merge_counters, rows_to_table)
from pipelines.annotate_writer import RunTally, SpoolStage, finish_shard, spool_root, spooled_rows
from pipelines.vlm_calls import STOP_KINDS
from relate.annotation_stats import (annotation_statistics, format_annotation_table, format_throughput_line, format_usage_line,
                                     format_vlm_line, throughput, vlm_call_stats)
from relate.config import StrictConfig, dump_config, parse_job_args
from relate.storage import Location
from relate.data.corpus import SPLITS
from relate.gate import GateConfig, TopUpConfig
from relate.jobinfo import Progress, run_name
from relate.placement import ResourcesConfig, ray_remote_args
from relate.schema import CORPUS_SCHEMA, REJECTIONS_SCHEMA

__all__ = ["AnnotateConfig", "AnnotateResult", "AnnotationStopped", "build_annotation", "main", "shard_plan",
           "annotate_local"]


class AnnotationStopped(RuntimeError):
    """The run cannot succeed (VLM unreachable or misconfigured); what it finished is on disk."""


class StageResources(StrictConfig):
    """Actor pool size, batch size and what each actor of the model-calling stage reserves."""

    concurrency: int = Field(1, ge=1, description="Actors running the backend (per pass); the vllm backend sizes its pool with vlm.vllm.concurrency.")
    batch_size: int = Field(8, ge=1, description="Images per backend call.")
    resources: ResourcesConfig = Field(default_factory=lambda: ResourcesConfig(num_cpus=0.5), description="Per actor (per vLLM engine for the vllm backend): CPUs (fractional on small machines, or reads deadlock), GPU fraction and the custom 'annotator' resource that keeps annotators on the annotation node group.")


class CostConfig(StrictConfig):
    """What the run's GPU time costs (for the cost estimate in the statistics)."""

    gpu_hour_usd: float | None = Field(None, ge=0, description="Price of one GPU-hour in USD; the statistics then estimate the run's cost as GPU-seconds held x price. None: no estimate.")


class AnnotateConfig(StrictConfig):
    """The annotation job."""

    input_dir: Location = Field("runs/synthetic", description="Run folder holding corpus/<split>/*.parquet (image records + boxes; a relations column is optional). Ignored when 'images' is set.")
    images: ImagesInput | None = Field(None, description="Annotate your own images instead: a folder plus a JSON Lines boxes file (categories optional, no relations).")
    out_dir: Location = Field("runs/annotated", description="Where kept/rejected shards, failures and statistics go.")
    splits: list[str] = Field(default_factory=lambda: list(SPLITS), description="Splits to annotate.")
    limit: int | None = Field(None, ge=1, description="Annotate only the first N images per split (by id).")
    shard_size: int = Field(64, ge=1, description="Images per output shard (the unit of resume).")
    id_base: int = Field(1, ge=0, description="Number drawn on the first box (markers, prompts, parsing agree).")
    outlines: bool = Field(False, description="Also outline each box on the marked image.")
    duplicate_person_rate: float = Field(0.0, ge=0, le=1, description="Synthetic only: add a jittered duplicate person box with this probability, to exercise the person gate.")
    seed: int = Field(0, description="Seed of the synthetic box noise.")
    prompt_dir: str | None = Field(None, description="Folder of alternative prompt templates (default: relate/prompts).")
    vlm: VLMConfig = Field(default_factory=VLMConfig, description="Annotator backend (retries and backoff of HTTP calls: vlm.openai.max_retries, backoff_s, max_backoff_s).")
    max_consecutive_failures: int | None = Field(64, ge=1, description="Stop the run (AnnotationStopped) when this many VLM calls in a row fail after their retries in one actor: the VLM is down or misconfigured. None: never stop, record every failure.")
    generate: StageResources = Field(default_factory=StageResources, description="Resources of the generate stage.")
    gate: GateConfig = Field(default_factory=GateConfig, description="Algorithm 1 thresholds and balancing.")
    topup: TopUpConfig = Field(default_factory=TopUpConfig, description="Geometric top-up of sparse images.")
    cpu_batch_size: int = Field(32, ge=1, description="Images per batch in the CPU stages (markers, parse, gate).")
    cpu_resources: ResourcesConfig = Field(default_factory=lambda: ResourcesConfig(num_cpus=0.25), description="Per task of the CPU stages (markers, prompts, parse, gate) and of the per-shard balance-and-write tasks.")
    cost: CostConfig = Field(default_factory=CostConfig, description="Price per GPU-hour for the run's cost estimate.")

    @model_validator(mode="after")
    def _check(self) -> "AnnotateConfig":
        bad = [s for s in self.splits if s not in SPLITS]
        if bad:
            raise ValueError(f"unknown split(s) {bad}; valid: {list(SPLITS)}")
        if self.vlm.backend == "vllm" and self.generate.resources.num_gpus == 0:
            raise ValueError("vlm.backend=vllm runs an engine per GPU (fraction): set generate.resources.num_gpus "
                             "(e.g. 1, or 0.5 to pack two engines on one GPU)")
        return self


@dataclass
class AnnotateResult:
    out_dir: Path
    stats: dict
    shards_written: int
    shards_skipped: int
    shards_incomplete: int = 0
    failures: pa.Table | None = field(default=None, repr=False)  # outstanding failed calls (FAILURES_SCHEMA)

    @property
    def complete(self) -> bool:
        return self.shards_incomplete == 0


def shard_plan(cfg: AnnotateConfig) -> pa.Table:
    """All input image records with their split and shard (``<split>/part-NNNNN``), sorted by id."""
    tables = []
    for split, t in read_records(cfg.input_dir, cfg.splits, cfg.images).items():
        if cfg.limit:
            t = t.slice(0, cfg.limit)
        shard = [f"{split}/part-{i // cfg.shard_size:05d}" for i in range(t.num_rows)]
        tables.append(t.append_column("shard", pa.array(shard, pa.string())))
    if not tables:
        where = cfg.images.boxes_file if cfg.images else f"{cfg.input_dir} (splits {cfg.splits})"
        raise FileNotFoundError(f"no input images in {where}")
    return pa.concat_tables(tables)


def _outcomes_table(batch: pa.Table) -> pa.Table:
    from actors.vlm.vllm_data import vllm_outcomes

    return rows_to_table(vllm_outcomes(batch), batch.schema)


def build_annotation(ds, cfg: AnnotateConfig):
    """The unmaterialised Ray Data graph: image records in, gated rows (relations, rejected) out."""
    import ray
    cpu = dict(batch_format="pyarrow", batch_size=cfg.cpu_batch_size, **ray_remote_args(cfg.cpu_resources))
    ds = ds.map_batches(MarkStage(cfg.id_base, cfg.outlines, cfg.duplicate_person_rate, cfg.seed), **cpu)
    gen = cfg.generate
    if cfg.vlm.backend == "vllm":
        from actors.vlm.vllm_data import build_vllm_processor
        from relate.prompts import load_prompt

        for pass_name in VLM_PASSES:
            ds = ds.map_batches(PromptStage(pass_name, cfg.id_base, cfg.prompt_dir), **cpu)
            ds = build_vllm_processor(cfg.vlm.vllm, gen.resources, load_prompt("system_annotate").text,
                                      cfg.cpu_resources.num_cpus)(ds)
            ds = ds.map_batches(_outcomes_table, **cpu)  # engine errors -> recorded failures
            ds = ds.map_batches(ParseStage(pass_name, cfg.id_base, max_consecutive_failures=cfg.max_consecutive_failures),
                                **cpu)
    else:
        ds = ds.map_batches(PassesStage, fn_constructor_kwargs=dict(vlm=cfg.vlm.model_dump(), id_base=cfg.id_base,
                            prompt_dir=cfg.prompt_dir, max_consecutive_failures=cfg.max_consecutive_failures),
                            batch_format="pyarrow", batch_size=gen.batch_size,
                            compute=ray.data.ActorPoolStrategy(min_size=1, max_size=gen.concurrency),
                            **ray_remote_args(gen.resources))
    # balancing needs the whole shard (its strata), so the driver does it when a shard completes
    return ds.map_batches(GateStage(cfg.gate.model_copy(update={"balance": False}), cfg.topup), **cpu)


def annotate_local(records: pa.Table, cfg: AnnotateConfig, out_dir: str | Path | None = None) -> list[dict]:
    """The same stages without Ray, in this process (unit tests, benchmarks, debugging).

    ``records`` are input rows with ``reference`` (source relations) and ``shard`` columns, as
    :func:`shard_plan` makes them; returns the rows as written, balanced per shard, and writes
    the shards to ``out_dir`` when given (exactly as :func:`main` would).
    """
    if cfg.vlm.backend == "vllm":
        raise ValueError("annotate_local cannot run the vllm backend; use main() on a Ray cluster")
    mark = MarkStage(cfg.id_base, cfg.outlines, cfg.duplicate_person_rate, cfg.seed)
    passes = PassesStage(cfg.vlm.model_dump(), cfg.id_base, cfg.prompt_dir)
    gate = GateStage(cfg.gate.model_copy(update={"balance": False}), cfg.topup)
    rows: list[dict] = []
    for i in range(0, records.num_rows, cfg.cpu_batch_size):
        rows += gate(passes(mark(records.slice(i, cfg.cpu_batch_size)))).to_pylist()
    by_shard: dict[str, list[dict]] = {}
    for r in rows:
        by_shard.setdefault(r["shard"], []).append(r)
    out = []
    for shard, group in sorted(by_shard.items()):
        group.sort(key=lambda r: r["image_id"])
        if out_dir is not None:
            write_shard(Path(out_dir), shard, group, cfg.gate)  # balances in place, then writes
        else:
            balance_shard([r for r in group if not r.get("image_error") and not r.get("failure_json")], shard, cfg.gate)
        out += group
    return out


_STATE = {"resume_from": (pa.int32(), 0), "attempts_before": (pa.int32(), 0), "cands_json": (pa.string(), "[]"),
          "counters_json": (pa.string(), "{}")}  # what a resumed image carries into the passes


def _with_state(t: pa.Table) -> pa.Table:
    for name, (typ, default) in _STATE.items():
        t = t.append_column(name, pa.array([default] * t.num_rows, typ))
    return t


def _resume_row(plan_row: dict, left: dict) -> dict:
    """A failed image as a rerun's input: its record plus the state after its last good call."""
    f = json.loads(left["failure_json"])
    return dict(plan_row, resume_from=VLM_PASSES.index(f["pass"]), attempts_before=int(f.get("attempts", 0)),
                cands_json=left.get("cands_json") or "[]", counters_json=left.get("counters_json") or "{}")


def _work(cfg: AnnotateConfig, plan: pa.Table) -> tuple[pa.Table, dict[str, list[dict]], int]:
    """What this run annotates (input rows with resume state), the images earlier runs finished
    in incomplete shards (carried), and how many shards were complete before."""
    out = Path(cfg.out_dir)
    shards = sorted(set(plan.column("shard").to_pylist()))
    done = {s for s in shards if shard_paths(out, s).done()}
    for s in done:  # a run killed between the done marker and the clean-up left these behind
        shard_paths(out, s).pending.unlink(missing_ok=True)
        shard_paths(out, s).failures.unlink(missing_ok=True)
    carried: dict[str, list[dict]] = {}
    failed: dict[str, dict] = {}
    for s in sorted(set(shards) - done):
        left = load_pending(out, s)
        if left is not None:
            carried[s] = [r for r in left if not r.get("failure_json")]
            failed.update({r["image_id"]: r for r in left if r.get("failure_json")})
    shard_col = plan.column("shard").to_pylist()
    keep = [s not in done and s not in carried for s in shard_col]
    fresh = plan if all(keep) else plan.filter(pa.array(keep))  # a first run: no second copy of every record
    parts = [_with_state(fresh)] if fresh.num_rows else []
    if failed:
        again = plan.filter(pa.array([i in failed for i in plan.column("image_id").to_pylist()])).to_pylist()
        resumed = [_resume_row(r, failed[r["image_id"]]) for r in again]
        parts.append(rows_to_table(resumed, _with_state(plan.slice(0, 0)).schema).select(_with_state(plan.slice(0, 0)).schema.names))
    work = pa.concat_tables([p.cast(parts[0].schema) for p in parts]) if parts else _with_state(plan.slice(0, 0))
    return work, carried, len(done)


def _final_stats(cfg: AnnotateConfig, shards: Sequence[str], extra: dict | None = None) -> dict:
    """Run statistics over the complete shards, plus the calls and failures of incomplete ones
    (and ``extra``, e.g. this run's throughput), written to ``stats/annotation_stats.json``."""
    out = Path(cfg.out_dir)
    kept, rej, counters = [], [], {}
    for s in sorted(shards):
        p = shard_paths(out, s)
        if p.done():
            kept.append(pq.read_table(p.kept))
            rej.append(pq.read_table(p.rejected))
            counters = merge_counters(counters, json.loads(p.stats.read_text()))
        else:
            for r in load_pending(out, s) or []:
                counters = merge_counters(counters, {"vlm": json.loads(r.get("counters_json") or "{}").get("vlm", {})})
    stats = annotation_statistics(pa.concat_tables(kept) if kept else CORPUS_SCHEMA.empty_table(),
                                  pa.concat_tables(rej) if rej else REJECTIONS_SCHEMA.empty_table(), counters)
    fails = read_failures(out)
    outstanding = {}
    for k in fails.column("kind").to_pylist():
        outstanding[k] = outstanding.get(k, 0) + 1
    stats["vlm"] = vlm_call_stats(counters, outstanding)
    stats["images_failed"] = len(set(fails.column("image_id").to_pylist()))
    stats.update(extra or {})
    atomic_write(out / "stats" / "annotation_stats.json", lambda p: p.write_text(json.dumps(stats, indent=2, sort_keys=True)))
    return stats


def _stopped(out: Path, work: pa.Table, unsubmitted: Sequence[str], gate: GateConfig) -> None:
    """Save what a stopping run finished: each shard with new images in the spool keeps them as
    pending, the images that did not come back listed as not run (a rerun annotates exactly those)."""
    for s in unsubmitted:
        if not spooled_rows(out, s):
            continue  # nothing new: the shard's files (none, or an earlier run's pending) stand as they were
        rest = work.filter(pa.compute.equal(work.column("shard"), s)).to_pylist()
        finish_shard(out, s, gate, len(rest), missing_from=rest)


def _gpus_held(cfg: AnnotateConfig) -> float:
    """GPUs the VLM stage reserves for the whole run: engines (or actors) x GPUs each (x3 passes for vLLM)."""
    if cfg.vlm.backend == "vllm":
        return len(VLM_PASSES) * cfg.vlm.vllm.concurrency * cfg.generate.resources.num_gpus
    return cfg.generate.concurrency * cfg.generate.resources.num_gpus


def main(cfg: AnnotateConfig) -> AnnotateResult:
    """Run (or resume) the annotation job; returns the run statistics and any outstanding failures."""
    import ray

    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dump_config(cfg, out / "annotate_config.yaml")
    for stale in out.rglob(".*.tmp-*"):  # half-written files of a killed driver: never read, drop them
        stale.unlink(missing_ok=True)
    plan = shard_plan(cfg)
    all_shards = sorted(set(plan.column("shard").to_pylist()))
    work, carried, skipped = _work(cfg, plan)
    expected = dict(zip(*_counts(work)))
    written = incomplete = 0
    name = run_name("annotate", cfg.out_dir)
    print(f"[{name}] {plan.num_rows} images in {len(all_shards)} shards: {skipped} done before, {len(expected)} to "
          f"annotate ({work.num_rows} images, {sum(map(len, carried.values()))} kept from earlier runs)", flush=True)
    extra: dict = {}
    if work.num_rows:
        if not ray.is_initialized():
            ray.init(ignore_reinit_error=True, log_to_driver=False)
        shutil.rmtree(spool_root(out), ignore_errors=True)  # a killed run's scratch: this run redoes it
        step = cfg.cpu_batch_size
        t_start = time.monotonic()
        ds = build_annotation(ray.data.from_arrow([work.slice(i, step) for i in range(0, work.num_rows, step)]), cfg)
        # balancing and writing: in the same Ray task as the gate (spool), then one task per shard
        ds = ds.map_batches(SpoolStage(str(out)), batch_format="pyarrow", batch_size=cfg.cpu_batch_size,
                            **ray_remote_args(cfg.cpu_resources))
        ds.set_name(name)  # the Ray Data dashboard and metric tags show the run, not "dataset_17"
        finish = ray.remote(finish_shard).options(**ray_remote_args(cfg.cpu_resources), max_retries=2)
        tally = RunTally(expected)
        running: dict = {}  # ObjectRef -> shard

        def emit(line: str) -> None:
            vlm = tally.vlm()
            print(f"{line} | {tally.images} images, {tally.images / max(time.monotonic() - t_start, 1e-9):.1f} images/s"
                  f" | {format_vlm_line(vlm)} | {format_usage_line(vlm)}", flush=True)

        progress = Progress(name, "shards", len(expected), emit=emit)

        def commit(block: bool) -> None:
            nonlocal written, incomplete
            ready, _ = ray.wait(list(running), num_returns=len(running), timeout=None if block else 0)
            for ref in ready:
                running.pop(ref)
                if ray.get(ref):
                    written += 1
                else:
                    incomplete += 1
                progress.update()

        try:
            for batch in ds.iter_batches(batch_format="pyarrow", batch_size=None):
                for s in tally.add(batch):
                    running[finish.remote(str(out), s, cfg.gate, expected[s])] = s
                if running:
                    commit(block=False)
            while running:
                commit(block=True)
        except Exception as exc:
            if running:  # shards already being written: let them finish (or fail) first
                ray.wait(list(running), num_returns=len(running), timeout=120)
            submitted = set(running.values()) | {s for s in expected if shard_paths(out, s).done()}
            _stopped(out, work, [s for s in expected if s not in submitted], cfg.gate)
            _final_stats(cfg, all_shards)
            cause = _cause(exc)
            raise AnnotationStopped(f"annotation stopped: {cause}. Everything finished is on disk under {out} "
                                    f"(complete shards, and pending/ + failures/ for the rest); fix the cause and rerun "
                                    f"the same command: it annotates only what is missing") from exc
        wall = time.monotonic() - t_start
        shutil.rmtree(spool_root(out), ignore_errors=True)  # every shard is written: only empty folders are left
        run_vlm = vlm_call_stats({"vlm": tally.counters})
        extra["throughput"] = throughput(run_vlm, work.num_rows, wall, _gpus_held(cfg), cfg.cost.gpu_hour_usd)
        extra["throughput"]["vlm_this_run"] = run_vlm
        print(f"[{name}] this run: {format_throughput_line(extra['throughput'])}", flush=True)
        stats = ray.get(ray.remote(_final_stats).options(**ray_remote_args(cfg.cpu_resources)).remote(cfg, all_shards, extra))
    else:  # nothing to annotate: the throughput of the last run that annotated something stands
        prev = out / "stats" / "annotation_stats.json"
        last = json.loads(prev.read_text()).get("throughput") if prev.exists() else None
        stats = _final_stats(cfg, all_shards, {"throughput": last} if last else None)
    print(format_annotation_table(stats))
    fails = read_failures(out)
    n_inc = sum(1 for s in all_shards if not shard_paths(out, s).done())
    fatal = [f for f in fails.to_pylist() if f["kind"] in STOP_KINDS]
    if fatal:
        raise AnnotationStopped(f"annotation stopped: {fatal[0]['message']}. {len(all_shards) - n_inc} shards are complete "
                                f"and every finished image of the other {n_inc} is kept under {out / 'pending'}; "
                                f"{fails.num_rows} calls are listed in {out / 'failures'}. Fix the cause and rerun the "
                                f"same command: it annotates only what is missing")
    if n_inc:
        print(f"[{name}] INCOMPLETE: {fails.num_rows} VLM calls failed after their retries "
              f"({format_vlm_line(stats['vlm'])}) in {n_inc} shards; listed in {out / 'failures'}; "
              f"rerun the same command to retry exactly those calls", flush=True)
    return AnnotateResult(out, stats, written, skipped, n_inc, fails)


def _cause(exc: BaseException) -> str:
    """The message of the error that stopped the run, dug out of Ray's wrappers (which put the
    worker's traceback first and their own advice last)."""
    import re

    seen = exc
    while seen is not None:
        m = re.search(r"(\w+Error): (.+)", str(seen))
        if m:
            return m.group(2).strip()
        seen = seen.__cause__
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _counts(t: pa.Table) -> tuple[list[str], list[int]]:
    vc = t.column("shard").value_counts().to_pylist() if t.num_rows else []
    return [d["values"] for d in vc], [d["counts"] for d in vc]


if __name__ == "__main__":
    # run through the importable module, not __main__, so Ray workers unpickle stages and configs by reference
    import pipelines.annotate as _job

    _res = _job.main(parse_job_args(_job.AnnotateConfig, sys.argv[1:], description=__doc__.splitlines()[0]))
    sys.exit(0 if _res.complete else 3)  # failed calls are listed; a nonzero exit makes the job show it
