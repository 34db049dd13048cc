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

The driver plans from the image ids alone (:func:`plan_shards`: the ``image_id`` column of each
input file, kept as the first id of each shard); Ray Data reads the records in its own tasks
(:class:`ReadStage`, one input row group each, then :class:`WorkStage`; a boxes file is first
copied, a chunk at a time, to a Parquet file of records under ``<out_dir>/spool/_input``), so the
driver holds no record. A shard is written as
soon as all its images are through; an input written in id order (as run folders are) completes
shards steadily, one in another order completes them as their last images arrive.

Shard membership is fixed by sorted image id, every per-image decision is a pure function of the
image (seeded by its id), so after a crash a rerun processes only the unfinished shards, and
after failed calls a rerun makes exactly those calls again; either way the corpus ends
identical to an uninterrupted, failure-free run. A run that cannot succeed (the VLM is down,
the key is wrong) stops with :class:`AnnotationStopped` after writing what it finished.
"""

from __future__ import annotations

import bisect
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
from pipelines.annotate_input import (RECORDS_SCHEMA, ImagesInput, as_records, check_input_schema, iter_boxes_file,
                                      read_records, source_columns, split_files)
from pipelines.annotate_shards import (atomic_write, balance_shard, load_pending, read_failures,
                                       shard_paths, write_shard)
from pipelines.annotate_stages import (PAIRS_PASS, PASS_ORDER, VLM_PASSES, GateStage, MarkStage, ParseStage,
                                      PassesStage, PromptStage,
                                       merge_counters, rows_to_table)
from pipelines.annotate_writer import RunTally, SpoolStage, finish_shard, spool_root, spooled_rows
from pipelines.vlm_calls import STOP_KINDS
from relate.annotation_stats import (AnnotationTally, format_annotation_table, format_throughput_line, format_usage_line,
                                     format_vlm_line, throughput, vlm_call_stats)
from relate.config import StrictConfig, dump_config, parse_job_args
from relate.storage import Location
from relate.gate import GateConfig, TopUpConfig
from relate.jobinfo import Progress, run_name
from relate.data.corpus import SPLITS, require_corpus
from relate.job_inputs import MAKE_WORLD, require_path
from relate.placement import ResourcesConfig, ray_remote_args

__all__ = ["AnnotateConfig", "AnnotateResult", "AnnotationStopped", "build_annotation", "build_work", "main",
           "shard_plan", "plan_shards", "ShardPlan", "SplitPlan", "WorkStage", "ReadStage", "read_units",
           "mark_stage", "lean_driver", "annotate_local"]


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
    read_rows: int = Field(512, ge=1, description="Input records per read task (a slice of one row group): each task reads them, draws their markers and passes them on in blocks of cpu_batch_size, so no record waits in the driver.")
    in_flight_mb: float | None = Field(32, gt=0, description="Object-store budget of the run's Ray Data execution, MB: reading and marking stop running ahead of the annotator once the blocks queued and in flight reach it (Ray Data's backpressure; a budget smaller than one block still makes progress, a block at a time). The default holds about four batches of eight marked photographs (a 1024 px PNG is 1-2 MB); size it to a few batches per annotator (annotate_gpu.yaml: 16 engines). None: Ray Data's default, a share of the cluster's object store, which a long run fills with queued images.")
    cpu_resources: ResourcesConfig = Field(default_factory=lambda: ResourcesConfig(num_cpus=0.5), description="Per task of the CPU stages (markers, prompts, parse, gate) and of the per-shard balance-and-write tasks. Each concurrent task holds a Ray worker process and each new worker costs its start-up: at 0.25 a 2-core run of 2,000 images started 18-22 workers and its non-VLM CPU per image was 17.8 ms, at 0.5 it starts 10 and reads 10.0 ms (benchmarks.annotate_overhead).")
    cost: CostConfig = Field(default_factory=CostConfig, description="Price per GPU-hour for the run's cost estimate.")
    pairs_per_image: int = Field(0, ge=0, description="The pairs pass: after the spatial pass, one more VLM call per image "
                                 "asking for every relation of this many of its box pairs, drawn uniformly "
                                 "(relate.pair_sample). The corpus records them in asked_pairs, so training knows what "
                                 "does not hold there and counts P(q|p) on them. 0: three passes, no pairs pass.")

    @model_validator(mode="after")
    def _check(self) -> "AnnotateConfig":
        bad = [s for s in self.splits if s not in SPLITS]
        if bad:
            raise ValueError(f"unknown split(s) {bad}; valid: {list(SPLITS)}")
        if self.vlm.backend == "vllm" and self.generate.resources.num_gpus == 0:
            raise ValueError("vlm.backend=vllm runs an engine per GPU (fraction): set generate.resources.num_gpus "
                             "(e.g. 1, or 0.5 to pack two engines on one GPU)")
        if self.pairs_per_image and self.vlm.backend == "scripted" and self.vlm.scripted.world is None:
            if self.images is not None:
                raise ValueError("the scripted annotator answers the pairs pass from a synthetic world's rules; "
                                 "your own images have none: set pairs_per_image=0 or use a VLM backend")
            self.vlm.scripted.world = str(self.input_dir)  # the world the images come from
        return self

    @property
    def passes(self) -> tuple[str, ...]:
        """The VLM passes each image gets, in order."""
        return VLM_PASSES + (PAIRS_PASS,) if self.pairs_per_image else VLM_PASSES


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
    """All input image records with their split and shard (``<split>/part-NNNNN``), sorted by id.

    For tests and :func:`annotate_local`: it holds every record. :func:`main` plans from the
    image ids alone (:func:`plan_shards`, the same shards) and lets Ray Data read the records.
    """
    tables = []
    for split, t in read_records(cfg.input_dir, cfg.splits, cfg.images).items():
        if cfg.limit:
            t = t.slice(0, cfg.limit)
        shard = [f"{split}/part-{i // cfg.shard_size:05d}" for i in range(t.num_rows)]
        tables.append(t.append_column("shard", pa.array(shard, pa.string())))
    if not tables:
        raise FileNotFoundError(f"no input images in {_where(cfg)}")
    return pa.concat_tables(tables)


def _where(cfg: AnnotateConfig) -> str:
    return cfg.images.boxes_file if cfg.images else f"{cfg.input_dir} (splits {cfg.splits})"


@dataclass(frozen=True)
class SplitPlan:
    """The shards of one split, without its records: shard ``i`` holds the images whose ids sort
    from ``starts[i]`` up to (not including) ``starts[i + 1]``, the last one up to ``last``."""

    split: str
    files: tuple[str, ...]  # Parquet files holding the split's records (read by Ray Data, not the driver)
    starts: tuple[str, ...]  # first image id of each shard
    last: str  # last image id annotated (the limit)
    sizes: tuple[int, ...]  # images per shard

    def shard(self, i: int) -> str:
        return f"{self.split}/part-{i:05d}"

    def shards_of(self, ids: Sequence[str]) -> list[str | None]:
        """The shard of each image id (None: past the limit)."""
        return [self.shard(bisect.bisect_right(self.starts, i) - 1) if self.starts[0] <= i <= self.last else None
                for i in ids]


@dataclass(frozen=True)
class ShardPlan:
    splits: tuple[SplitPlan, ...]

    @property
    def sizes(self) -> dict[str, int]:
        """Images per shard, every shard of the run."""
        return {sp.shard(i): n for sp in self.splits for i, n in enumerate(sp.sizes)}


def _input_files(cfg: AnnotateConfig, scratch: Path) -> dict[str, list[Path]]:
    """Parquet files of image records per split: the run folder's own, or the boxes file written
    as records under ``scratch`` (a chunk at a time)."""
    if cfg.images is None:
        return {split: files for split in cfg.splits if (files := split_files(cfg.input_dir, split))}
    path = scratch / "_input" / cfg.images.split / "part-0.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    with pq.ParquetWriter(path, RECORDS_SCHEMA) as writer:
        for chunk in iter_boxes_file(cfg.images):
            writer.write_table(chunk)
    return {cfg.images.split: [path]}


def plan_shards(cfg: AnnotateConfig, files: dict[str, list[Path]]) -> ShardPlan:
    """Shards from the image ids alone (only the ``image_id`` column of each file is read): the
    same shards as :func:`shard_plan`, without holding a record."""
    splits = []
    for split, paths in files.items():
        chunks = []
        for f in paths:
            check_input_schema(f, pq.read_schema(f))
            chunks += pq.read_table(f, columns=["image_id"]).column("image_id").cast(pa.string()).chunks
        ids = pa.chunked_array(chunks, pa.string()).combine_chunks()
        ids = ids.take(pa.compute.array_sort_indices(ids))
        if cfg.limit:
            ids = ids.slice(0, cfg.limit)
        if not len(ids):
            continue
        if len(ids) > 1 and pa.compute.any(pa.compute.equal(ids.slice(1), ids.slice(0, len(ids) - 1))).as_py():
            raise ValueError(f"{split}: image ids repeat in {[str(f) for f in paths]}; each image needs its own id")
        n, size = len(ids), cfg.shard_size
        splits.append(SplitPlan(split, tuple(str(f) for f in paths), tuple(ids.take(pa.array(range(0, n, size))).to_pylist()),
                                ids[n - 1].as_py(), tuple(min(size, n - a) for a in range(0, n, size))))
    if not splits:
        raise FileNotFoundError(f"no input images in {_where(cfg)}")
    return ShardPlan(tuple(splits))


def _outcomes_table(batch: pa.Table) -> pa.Table:
    from actors.vlm.vllm_data import vllm_outcomes

    return rows_to_table(vllm_outcomes(batch), batch.schema)


def mark_stage(cfg: AnnotateConfig) -> MarkStage:
    return MarkStage(cfg.id_base, cfg.outlines, cfg.duplicate_person_rate, cfg.seed)


def build_annotation(ds, cfg: AnnotateConfig, marked: bool = False):
    """The unmaterialised Ray Data graph: image records in, gated rows (relations, rejected) out.

    ``marked``: ``ds`` is :func:`build_work`'s, whose read tasks already drew the markers.
    """
    import ray
    cpu = dict(batch_format="pyarrow", batch_size=cfg.cpu_batch_size, **ray_remote_args(cfg.cpu_resources))
    if not marked:
        ds = ds.map_batches(mark_stage(cfg), **cpu)
    gen = cfg.generate
    if cfg.vlm.backend == "vllm":
        from actors.vlm.vllm_data import build_vllm_processor
        from relate.prompts import load_prompt

        for pass_name in cfg.passes:
            ds = ds.map_batches(PromptStage(pass_name, cfg.id_base, cfg.prompt_dir, cfg.pairs_per_image, cfg.seed), **cpu)
            ds = build_vllm_processor(cfg.vlm.vllm, gen.resources, load_prompt("system_annotate").text,
                                      cfg.cpu_resources.num_cpus)(ds)
            ds = ds.map_batches(_outcomes_table, **cpu)  # engine errors -> recorded failures
            ds = ds.map_batches(ParseStage(pass_name, cfg.id_base, max_consecutive_failures=cfg.max_consecutive_failures),
                                **cpu)
    else:
        ds = ds.map_batches(PassesStage, fn_constructor_kwargs=dict(vlm=cfg.vlm.model_dump(), id_base=cfg.id_base,
                            prompt_dir=cfg.prompt_dir, max_consecutive_failures=cfg.max_consecutive_failures,
                            passes=cfg.passes, pairs_per_image=cfg.pairs_per_image, seed=cfg.seed),
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
    passes = PassesStage(cfg.vlm.model_dump(), cfg.id_base, cfg.prompt_dir, cfg.passes,
                         pairs_per_image=cfg.pairs_per_image, seed=cfg.seed)
    gate = GateStage(cfg.gate.model_copy(update={"balance": False}), cfg.topup)
    mark = mark_stage(cfg)
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
WORK_SCHEMA = pa.schema([*RECORDS_SCHEMA, pa.field("shard", pa.string()), *(pa.field(k, t) for k, (t, _) in _STATE.items())])


def _resume_state(left: dict) -> dict:
    """A failed image's state after its last good call (from its pending row): what a rerun resumes from."""
    f = json.loads(left["failure_json"])
    return dict(resume_from=PASS_ORDER.index(f["pass"]), attempts_before=int(f.get("attempts", 0)),
                cands_json=left.get("cands_json") or "[]", counters_json=left.get("counters_json") or "{}")


class WorkStage:
    """Rows of a split's input files -> this run's work rows (WORK_SCHEMA): each record with its
    shard and resume state. Rows past the limit, and rows of shards that are done or carried
    from an earlier run (except the images whose calls are to be made again), are dropped.
    Runs in the Ray Data read tasks, so no record crosses the driver."""

    def __init__(self, split: SplitPlan, skip: frozenset[str], resume: dict[str, dict]) -> None:
        self.split, self.skip, self.resume = split, skip, resume

    def __call__(self, batch: pa.Table) -> pa.Table:
        t = as_records(batch, self.split.split)
        ids = t.column("image_id").to_pylist()
        shards = self.split.shards_of(ids)
        keep = [s is not None and (s not in self.skip or i in self.resume) for s, i in zip(shards, ids)]
        if not any(keep):
            return WORK_SCHEMA.empty_table()
        t = t.append_column("shard", pa.array(shards, pa.string()))
        for name, (typ, default) in _STATE.items():
            t = t.append_column(name, pa.array([self.resume.get(i, {}).get(name, default) for i in ids], typ))
        return t.filter(pa.array(keep)).cast(WORK_SCHEMA)


@dataclass
class _Work:
    """What this run annotates, as the driver knows it: shard membership and state, no records."""

    stages: list[WorkStage]  # one per split
    expected: dict[str, int]  # shard -> images this run annotates in it
    carried: int  # images earlier runs finished in incomplete shards
    done_before: int  # shards complete before this run


def _work(cfg: AnnotateConfig, plan: ShardPlan) -> _Work:
    """What this run annotates: the shards not done before (every image), and in the incomplete
    shards an earlier run left, the images whose calls failed (from their failed pass on)."""
    out = Path(cfg.out_dir)
    sizes = plan.sizes
    done = {s for s in sizes if shard_paths(out, s).done()}
    for s in done:  # a run killed between the done marker and the clean-up left these behind
        shard_paths(out, s).pending.unlink(missing_ok=True)
        shard_paths(out, s).failures.unlink(missing_ok=True)
    carried, resume, expected = 0, {}, {}
    for s in sorted(set(sizes) - done):
        left = load_pending(out, s)
        if left is None:
            expected[s] = sizes[s]
            continue
        carried += sum(1 for r in left if not r.get("failure_json"))
        resume.update({r["image_id"]: _resume_state(r) for r in left if r.get("failure_json")})
    skip = frozenset(done | {s for s in sizes if s not in done and s not in expected})
    stages = []
    for sp in plan.splits:
        mine = {i: r for i, r in resume.items() if sp.shards_of([i])[0] in skip - done}
        present = set()  # a failed image still in the input (and in its shard): it is annotated again
        for f in sp.files if mine else ():
            col = pq.read_table(f, columns=["image_id"]).column("image_id").cast(pa.string())
            present.update(col.filter(pa.compute.is_in(col, pa.array(sorted(mine), pa.string()))).to_pylist())
        mine = {i: r for i, r in mine.items() if i in present}
        for i in mine:
            s = sp.shards_of([i])[0]
            expected[s] = expected.get(s, 0) + 1
        stages.append(WorkStage(sp, skip, mine))
    expected = {s: expected[s] for s in sorted(expected)}
    return _Work(stages, expected, carried, len(done))


def _read_work(stages: Sequence[WorkStage], shards: set[str]) -> dict[str, list[dict]]:
    """The work rows of ``shards``, read here on the driver (a stopping run's last step)."""
    rows: dict[str, list[dict]] = {}
    want = pa.array(sorted(shards), pa.string())
    for stage in stages:
        for f in stage.split.files:
            pf = pq.ParquetFile(f)
            for b in pf.iter_batches(batch_size=4096, columns=source_columns(pf.schema_arrow)):
                t = stage(pa.Table.from_batches([b]))
                for r in t.filter(pa.compute.is_in(t.column("shard"), want)).to_pylist():
                    rows.setdefault(r["shard"], []).append(r)
    return rows


class ReadStage:
    """Read units in (one slice of an input row group each), marked work rows out: the slice's
    records are read here, in a Ray task, only the columns a record needs, turned into work rows
    (:class:`WorkStage`) and passed to ``mark`` (:class:`MarkStage`) ``rows_per_block`` at a time."""

    def __init__(self, stages: Sequence[WorkStage], rows_per_block: int, mark=None) -> None:
        self.stages = {st.split.split: st for st in stages}
        self.rows_per_block, self.mark = rows_per_block, mark

    def __call__(self, units: pa.Table):
        cols = ("split", "path", "row_group", "start", "stop")
        for split, path, group, start, stop in zip(*(units.column(c).to_pylist() for c in cols)):
            pf = pq.ParquetFile(path)
            at = 0  # iter_batches decodes from the start of the row group: skip to the slice
            for b in pf.iter_batches(batch_size=self.rows_per_block, row_groups=[group],
                                     columns=source_columns(pf.schema_arrow)):
                lo, hi = max(start - at, 0), min(stop - at, b.num_rows)
                at += b.num_rows
                if hi > lo:
                    t = self.stages[split](pa.Table.from_batches([b.slice(lo, hi - lo)]))
                    if t.num_rows:
                        yield self.mark(t) if self.mark is not None else t
                if at >= stop:
                    break


def read_units(stages: Sequence[WorkStage], read_rows: int) -> list[dict]:
    """The read tasks of a run: every row group of every input file, cut in slices of at most
    ``read_rows`` records (``start``/``stop`` within the group)."""
    units = []
    for st in stages:
        for f in st.split.files:
            meta = pq.ParquetFile(f).metadata
            for g in range(meta.num_row_groups):
                n = meta.row_group(g).num_rows
                units += [dict(split=st.split.split, path=f, row_group=g, start=a, stop=min(a + read_rows, n))
                          for a in range(0, n, read_rows)]
    return units


def build_work(stages: Sequence[WorkStage], read_rows: int, rows_per_block: int, remote_args: dict, mark=None):
    """The unmaterialised Ray Data source of the run: one small row per read unit
    (:func:`read_units`, the only thing the driver puts into the object store), read, turned into
    work rows and marked by ``mark`` in Ray tasks with ``remote_args``, cut into blocks of
    ``rows_per_block`` (one task per block downstream).

    Reading and marking share a task so that records never wait between them: a block of a few
    dozen records is small enough for Ray to keep in its owner's (the driver's) heap instead of the
    object store, and reads run far ahead of the model calls, so a separate read stage parked the
    whole input in the driver (measured: ~2 KB a record). Marked blocks carry images and go to the
    object store. ``ray.data.read_parquet`` is not used: its file listing asks a whole CPU, which
    a small cluster whose CPUs the annotator actors hold may never free."""
    import ray

    units = read_units(stages, read_rows)
    ds = ray.data.from_items(units, override_num_blocks=len(units))
    ds = ds.map_batches(ReadStage(stages, rows_per_block, mark), batch_format="pyarrow", batch_size=1, **remote_args)
    ds = ds.repartition(target_num_rows_per_block=rows_per_block)
    # Ray Data gives the repartition tasks a whole CPU and no public argument to change it: on a
    # small cluster whose CPUs the annotator actors hold they would never start (same as the file
    # listing of read_parquet), so they ask what the other CPU stages ask
    ds._logical_plan.dag.ray_remote_args.update(remote_args)
    return ds


def _final_stats(cfg: AnnotateConfig, shards: Sequence[str], extra: dict | None = None) -> dict:
    """Run statistics over the complete shards, plus the calls and failures of incomplete ones
    (and ``extra``, e.g. this run's throughput), written to ``stats/annotation_stats.json``."""
    out = Path(cfg.out_dir)
    tally, counters = AnnotationTally(), {}  # one shard at a time: memory flat in the corpus size
    for s in sorted(shards):
        p = shard_paths(out, s)
        if p.done():
            tally.add(pq.read_table(p.kept), pq.read_table(p.rejected))
            counters = merge_counters(counters, json.loads(p.stats.read_text()))
        else:
            for r in load_pending(out, s) or []:
                counters = merge_counters(counters, {"vlm": json.loads(r.get("counters_json") or "{}").get("vlm", {})})
    stats = tally.statistics(counters)
    fails = read_failures(out)
    outstanding = {}
    for k in fails.column("kind").to_pylist():
        outstanding[k] = outstanding.get(k, 0) + 1
    stats["vlm"] = vlm_call_stats(counters, outstanding)
    stats["images_failed"] = len(set(fails.column("image_id").to_pylist()))
    stats.update(extra or {})
    atomic_write(out / "stats" / "annotation_stats.json", lambda p: p.write_text(json.dumps(stats, indent=2, sort_keys=True)))
    return stats


def _stopped(out: Path, stages: Sequence[WorkStage], unsubmitted: Sequence[str], gate: GateConfig) -> None:
    """Save what a stopping run finished: each shard with new images in the spool keeps them as
    pending, the images that did not come back listed as not run (a rerun annotates exactly those)."""
    shards = [s for s in unsubmitted if spooled_rows(out, s)]  # others: their files (none, or an earlier run's pending) stand
    rows = _read_work(stages, set(shards)) if shards else {}
    for s in shards:
        rest = rows.get(s, [])
        finish_shard(out, s, gate, len(rest), missing_from=rest)


def _gpus_held(cfg: AnnotateConfig) -> float:
    """GPUs the VLM stage reserves for the whole run: engines (or actors) x GPUs each (x passes for vLLM)."""
    if cfg.vlm.backend == "vllm":
        return len(cfg.passes) * cfg.vlm.vllm.concurrency * cfg.generate.resources.num_gpus
    return cfg.generate.concurrency * cfg.generate.resources.num_gpus


def main(cfg: AnnotateConfig) -> AnnotateResult:
    """Run (or resume) the annotation job; returns the run statistics and any outstanding failures."""
    import ray

    if cfg.images is None:  # a missing input: one line naming the command that makes it (relate.job_inputs)
        require_corpus(cfg.input_dir, "annotation input (image records)", MAKE_WORLD, cfg.splits)
    else:
        require_path(cfg.images.boxes_file, "annotation input (boxes file)", "your own JSON Lines file: docs/jobs/annotation.md")
    if cfg.pairs_per_image and cfg.vlm.backend == "scripted":  # it answers the pairs pass from the world's rules
        from relate.data.world_truth import WORLD_CONFIG

        require_path(Path(cfg.vlm.scripted.world) / WORLD_CONFIG, "the world's rules the scripted pairs pass answers from",
                     MAKE_WORLD.replace("{path}", str(cfg.vlm.scripted.world)) + "; or pairs_per_image=0")
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dump_config(cfg, out / "annotate_config.yaml")
    for stale in out.rglob(".*.tmp-*"):  # half-written files of a killed driver: never read, drop them
        stale.unlink(missing_ok=True)
    shutil.rmtree(spool_root(out), ignore_errors=True)  # a killed run's scratch: this run redoes it
    # the driver plans from image ids and reads no record: Ray Data reads them in its tasks
    plan = plan_shards(cfg, _input_files(cfg, spool_root(out)))
    sizes = plan.sizes
    all_shards = sorted(sizes)
    work = _work(cfg, plan)
    expected, skipped = work.expected, work.done_before
    n_work = sum(expected.values())
    written = incomplete = 0
    name = run_name("annotate", cfg.out_dir)
    print(f"[{name}] {sum(sizes.values())} images in {len(all_shards)} shards: {skipped} done before, {len(expected)} to "
          f"annotate ({n_work} images, {work.carried} kept from earlier runs)", flush=True)
    extra: dict = {}
    if n_work:
        if not ray.is_initialized():
            ray.init(ignore_reinit_error=True, log_to_driver=False)
        t_start = time.monotonic()
        ds = build_annotation(build_work(work.stages, cfg.read_rows, cfg.cpu_batch_size, ray_remote_args(cfg.cpu_resources),
                                         mark_stage(cfg)), cfg, marked=True)
        # balancing and writing: in the same Ray task as the gate (spool), then one task per shard
        ds = ds.map_batches(SpoolStage(str(out)), batch_format="pyarrow", batch_size=cfg.cpu_batch_size,
                            **ray_remote_args(cfg.cpu_resources))
        ds.set_name(name)  # the Ray Data dashboard and metric tags show the run, not "dataset_17"
        if cfg.in_flight_mb is not None:
            opts = ds.context.execution_options
            opts.resource_limits = opts.resource_limits.copy(object_store_memory=cfg.in_flight_mb * 1024 * 1024)
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
            _stopped(out, work.stages, [s for s in expected if s not in submitted], cfg.gate)
            _final_stats(cfg, all_shards)
            cause = _cause(exc)
            raise AnnotationStopped(f"annotation stopped: {cause}. Everything finished is on disk under {out} "
                                    f"(complete shards, and pending/ + failures/ for the rest); fix the cause and rerun "
                                    f"the same command: it annotates only what is missing") from exc
        wall = time.monotonic() - t_start
        shutil.rmtree(spool_root(out), ignore_errors=True)  # every shard is written: only empty folders are left
        run_vlm = vlm_call_stats({"vlm": tally.counters})
        extra["throughput"] = throughput(run_vlm, n_work, wall, _gpus_held(cfg), cfg.cost.gpu_hour_usd)
        extra["throughput"]["vlm_this_run"] = run_vlm
        print(f"[{name}] this run: {format_throughput_line(extra['throughput'])}", flush=True)
        stats = ray.get(ray.remote(_final_stats).options(**ray_remote_args(cfg.cpu_resources)).remote(cfg, all_shards, extra))
    else:  # nothing to annotate: the throughput of the last run that annotated something stands
        prev = out / "stats" / "annotation_stats.json"
        last = json.loads(prev.read_text()).get("throughput") if prev.exists() else None
        stats = _final_stats(cfg, all_shards, {"throughput": last} if last else None)
        shutil.rmtree(spool_root(out), ignore_errors=True)  # the boxes file's records, when the input is one
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


def lean_driver() -> None:
    """Allocator settings for the process that drives a run (the job's entrypoint calls this; the
    ``annotate_scale`` benchmark measures why, docs/performance.md). The driver handles only
    small objects, but hundreds of thousands of them over a long run: Arrow's bundled mimalloc kept
    the freed pages of the small tables the driver deserialises (about 0.9 KB per annotated
    record), and glibc left holes in its heaps where Ray's buffers of a few tens of KB had been
    (about 0.6 KB per record). So Arrow allocates from the system allocator, and glibc maps every
    block from 64 KiB up on its own and unmaps it when freed. Process-wide, so not applied by
    :func:`main` itself (a test or notebook calling it keeps its own allocators)."""
    import ctypes

    pa.set_memory_pool(pa.system_memory_pool())
    try:
        ctypes.CDLL("libc.so.6").mallopt(-3, 64 * 1024)  # M_MMAP_THRESHOLD (fixed: no dynamic raise)
    except (OSError, AttributeError):  # not glibc: its allocator has its own return policy
        pass


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


if __name__ == "__main__":
    # run through the importable module, not __main__, so Ray workers unpickle stages and configs by reference
    import pipelines.annotate as _job

    _job.lean_driver()
    _res = _job.main(parse_job_args(_job.AnnotateConfig, sys.argv[1:], description=__doc__.splitlines()[0]))
    sys.exit(0 if _res.complete else 3)  # failed calls are listed; a nonzero exit makes the job show it
