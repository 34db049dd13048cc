"""Annotate a corpus with VLM passes over numbered markers, gate it, balance it, write it (seed 001, §4).

``python -m pipelines.annotate --config pipelines/configs/annotate_synthetic.yaml`` (or through
``ray job submit``). Ray Data graph per image: read record -> draw markers -> semantic pass ->
grow pass -> spatial pass (each: prompt, generate, parse) -> gate (Algorithm 1, repair,
balance, top-up, dedup). The driver streams finished images into shards and writes each shard
atomically once complete:

    <out_dir>/corpus/<split>/part-NNNNN.parquet        kept relations (CORPUS_SCHEMA)
    <out_dir>/rejections/<split>/part-NNNNN.parquet    rejections with the rule (REJECTIONS_SCHEMA)
    <out_dir>/stats/shards/<split>-part-NNNNN.json     counters (written last: marks the shard done)
    <out_dir>/stats/annotation_stats.json              run statistics (also printed as a table)

Shard membership is fixed by sorted image id, every per-image decision is a pure function of the
image (seeded by its id), so after a crash a rerun processes only the unfinished shards and ends
with a corpus identical to an uninterrupted run.
"""

from __future__ import annotations

import json
import os
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import Field, model_validator

from actors.vlm.configs import VLMConfig
from pipelines.annotate_stages import (VLM_PASSES, GateStage, MarkStage, ParseStage, PassesStage, PromptStage,
                                       merge_counters)
from relate.annotation_stats import annotation_statistics, format_annotation_table
from relate.config import StrictConfig, dump_config, parse_job_args
from relate.data.corpus import SPLITS, read_corpus
from relate.gate import BoxTable, Candidates, GateConfig, TopUpConfig, balance_relations
from relate.jobinfo import Progress, run_name
from relate.placement import ResourcesConfig, ray_remote_args
from relate.schema import CORPUS_SCHEMA, REJECTIONS_SCHEMA, to_table, validate_corpus, validate_rejections

__all__ = ["AnnotateConfig", "AnnotateResult", "build_annotation", "main", "shard_plan", "annotate_local"]


class StageResources(StrictConfig):
    """Actor pool size, batch size and what each actor of the model-calling stage reserves."""

    concurrency: int = Field(1, ge=1, description="Actors running the backend (per pass); the vllm backend sizes its pool with vlm.vllm.concurrency.")
    batch_size: int = Field(8, ge=1, description="Images per backend call.")
    resources: ResourcesConfig = Field(default_factory=lambda: ResourcesConfig(num_cpus=0.5), description="Per actor (per vLLM engine for the vllm backend): CPUs (fractional on small machines, or reads deadlock), GPU fraction and the custom 'annotator' resource that keeps annotators on the annotation node group.")


class AnnotateConfig(StrictConfig):
    """The annotation job."""

    input_dir: str = Field("runs/synthetic", description="Run folder holding corpus/<split>/*.parquet (images + boxes).")
    out_dir: str = Field("runs/annotated", description="Where kept/rejected shards and statistics go.")
    splits: list[str] = Field(default_factory=lambda: list(SPLITS), description="Splits to annotate.")
    limit: int | None = Field(None, ge=1, description="Annotate only the first N images per split (by id).")
    shard_size: int = Field(64, ge=1, description="Images per output shard (the unit of resume).")
    id_base: int = Field(1, ge=0, description="Number drawn on the first box (markers, prompts, parsing agree).")
    outlines: bool = Field(False, description="Also outline each box on the marked image.")
    duplicate_person_rate: float = Field(0.0, ge=0, le=1, description="Synthetic only: add a jittered duplicate person box with this probability, to exercise the person gate.")
    seed: int = Field(0, description="Seed of the synthetic box noise.")
    prompt_dir: str | None = Field(None, description="Folder of alternative prompt templates (default: relate/prompts).")
    vlm: VLMConfig = Field(default_factory=VLMConfig, description="Annotator backend.")
    generate: StageResources = Field(default_factory=StageResources, description="Resources of the generate stage.")
    gate: GateConfig = Field(default_factory=GateConfig, description="Algorithm 1 thresholds and balancing.")
    topup: TopUpConfig = Field(default_factory=TopUpConfig, description="Geometric top-up of sparse images.")
    cpu_batch_size: int = Field(32, ge=1, description="Images per batch in the CPU stages (markers, parse, gate).")
    cpu_resources: ResourcesConfig = Field(default_factory=lambda: ResourcesConfig(num_cpus=0.25), description="Per task of the CPU stages (markers, prompts, parse, gate).")

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


def _shard_name(split: str, k: int) -> str:
    return f"part-{k:05d}"


def shard_plan(cfg: AnnotateConfig) -> pa.Table:
    """All input image records with their split and shard (``<split>/part-NNNNN``), sorted by id."""
    tables = []
    for split in cfg.splits:
        try:
            t = read_corpus(cfg.input_dir, split)
        except FileNotFoundError:
            continue
        t = t.sort_by("image_id")
        if cfg.limit:
            t = t.slice(0, cfg.limit)
        shard = [f"{split}/{_shard_name(split, i // cfg.shard_size)}" for i in range(t.num_rows)]
        t = t.rename_columns([("reference" if c == "relations" else c) for c in t.column_names])
        tables.append(t.append_column("shard", pa.array(shard, pa.string())))
    if not tables:
        raise FileNotFoundError(f"no input corpus for splits {cfg.splits} under {cfg.input_dir}")
    return pa.concat_tables(tables)


def _paths(out: Path, shard: str) -> tuple[Path, Path, Path]:
    split, name = shard.split("/")
    return (out / "corpus" / split / f"{name}.parquet", out / "rejections" / split / f"{name}.parquet",
            out / "stats" / "shards" / f"{split}-{name}.json")


def _atomic_write(path: Path, write) -> None:
    """Write to a temporary name in the same folder, fsync, then rename (all or nothing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    write(tmp)
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _balance_shard(rows: list[dict], shard: str, gate: GateConfig) -> None:
    """Restate with p=1/2, stratified over the whole shard (§4.1), then drop new duplicates.

    Shards are fixed by the plan, so this is as deterministic as the per-image steps, and a
    shard's left/right, above/below and front/behind counts end within one of each other.
    """
    if not gate.balance:
        return
    bt = BoxTable.from_images([r["image_id"] for r in rows], [r["boxes"] for r in rows])
    flat = [(i, rel) for i, r in enumerate(rows) for rel in r["relations"]]
    c = Candidates.from_lists([i for i, _ in flat], [x["subject"] for _, x in flat], [x["object"] for _, x in flat],
                              [x["predicate"] for _, x in flat], [x["pass"] for _, x in flat])
    strata = np.full(len(flat), zlib.crc32(shard.encode()), np.uint64)
    s, o, pred, restated, dup = balance_relations(bt, c, gate, strata)
    for r in rows:
        r["relations"] = []
    for j, (i, rel) in enumerate(flat):
        if dup[j]:
            rows[i]["rejected"].append(dict(subject=rel["subject"], object=rel["object"], predicate=rel["predicate"],
                                            rule="duplicate", **{"pass": rel["pass"]}))
            continue
        if restated[j]:
            rel = dict(rel, subject=int(s[j]), object=int(o[j]), predicate=str(pred[j]), gate="restated")
        rows[i]["relations"].append(rel)


def _write_shard(out: Path, shard: str, rows: list[dict], gate: GateConfig) -> None:
    rows = sorted(rows, key=lambda r: r["image_id"])
    _balance_shard(rows, shard, gate)
    kept = to_table([{k: r[k] for k in CORPUS_SCHEMA.names} for r in rows], CORPUS_SCHEMA, table=shard)
    rej = to_table([{"image_id": r["image_id"], "rejected": r["rejected"]} for r in rows], REJECTIONS_SCHEMA, table=shard)
    validate_corpus(kept, name=f"kept {shard}")
    validate_rejections(rej, name=f"rejected {shard}")
    counters: dict = {"images": len(rows)}
    for r in rows:
        counters = merge_counters(counters, json.loads(r["counters_json"]))
    kp, rp, sp = _paths(out, shard)
    _atomic_write(kp, lambda p: pq.write_table(kept, p))
    _atomic_write(rp, lambda p: pq.write_table(rej, p))
    _atomic_write(sp, lambda p: p.write_text(json.dumps(counters, sort_keys=True)))  # last: shard complete


def build_annotation(ds, cfg: AnnotateConfig):
    """The unmaterialised Ray Data graph: image records in, gated rows (relations, rejected) out."""
    import ray
    cpu = dict(batch_format="pyarrow", batch_size=cfg.cpu_batch_size, **ray_remote_args(cfg.cpu_resources))
    ds = ds.map_batches(MarkStage(cfg.id_base, cfg.outlines, cfg.duplicate_person_rate, cfg.seed), **cpu)
    gen = cfg.generate
    if cfg.vlm.backend == "vllm":
        from actors.vlm.vllm_data import build_vllm_processor

        for pass_name in VLM_PASSES:
            ds = ds.map_batches(PromptStage(pass_name, cfg.id_base, cfg.prompt_dir), **cpu)
            ds = build_vllm_processor(cfg.vlm.vllm, gen.resources)(ds)
            ds = ds.map_batches(ParseStage(pass_name, cfg.id_base), **cpu)
    else:
        ds = ds.map_batches(PassesStage, fn_constructor_kwargs=dict(vlm=cfg.vlm.model_dump(), id_base=cfg.id_base,
                            prompt_dir=cfg.prompt_dir), batch_format="pyarrow", batch_size=gen.batch_size,
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
            _write_shard(Path(out_dir), shard, group, cfg.gate)  # balances in place, then writes
        else:
            _balance_shard(group, shard, cfg.gate)
        out += group
    return out


def _pending(cfg: AnnotateConfig, plan: pa.Table) -> tuple[pa.Table, set[str], int]:
    out = Path(cfg.out_dir)
    shards = sorted(set(plan.column("shard").to_pylist()))
    done = {s for s in shards if all(p.exists() for p in _paths(out, s))}
    mask = [s not in done for s in plan.column("shard").to_pylist()]
    return plan.filter(pa.array(mask)), set(shards) - done, len(done)


def _final_stats(cfg: AnnotateConfig, shards: Sequence[str]) -> dict:
    out = Path(cfg.out_dir)
    kept, rej, counters = [], [], {}
    for s in sorted(shards):
        kp, rp, sp = _paths(out, s)
        kept.append(pq.read_table(kp))
        rej.append(pq.read_table(rp))
        counters = merge_counters(counters, json.loads(sp.read_text()))
    stats = annotation_statistics(pa.concat_tables(kept), pa.concat_tables(rej), counters)
    _atomic_write(out / "stats" / "annotation_stats.json", lambda p: p.write_text(json.dumps(stats, indent=2, sort_keys=True)))
    return stats


def main(cfg: AnnotateConfig) -> AnnotateResult:
    """Run (or resume) the annotation job; returns the run statistics."""
    import ray

    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dump_config(cfg, out / "annotate_config.yaml")
    for stale in out.rglob(".*.tmp-*"):  # half-written files of a killed driver: never read, drop them
        stale.unlink(missing_ok=True)
    plan = shard_plan(cfg)
    pending, todo, skipped = _pending(cfg, plan)
    expected = {s: c for s, c in zip(*_counts(pending))}
    buffers: dict[str, list[dict]] = {s: [] for s in todo}
    written = 0
    name = run_name("annotate", cfg.out_dir)
    print(f"[{name}] {plan.num_rows} images in {len(todo) + skipped} shards: {skipped} done before, "
          f"{len(todo)} to annotate ({pending.num_rows} images)", flush=True)
    if pending.num_rows:
        if not ray.is_initialized():
            ray.init(ignore_reinit_error=True, log_to_driver=False)
        step = cfg.cpu_batch_size
        chunks = [pending.slice(i, step) for i in range(0, pending.num_rows, step)]
        ds = build_annotation(ray.data.from_arrow(chunks), cfg)
        ds.set_name(name)  # the Ray Data dashboard and metric tags show the run, not "dataset_17"
        progress = Progress(name, "shards", len(todo))
        for batch in ds.iter_batches(batch_format="pyarrow", batch_size=None):
            for row in batch.to_pylist():
                buf = buffers[row["shard"]]
                buf.append(row)
                if len(buf) == expected[row["shard"]]:
                    _write_shard(out, row["shard"], buf, cfg.gate)
                    buffers[row["shard"]] = []
                    written += 1
                    progress.update()
    stats = _final_stats(cfg, sorted(set(plan.column("shard").to_pylist())))
    print(format_annotation_table(stats))
    return AnnotateResult(out, stats, written, skipped)


def _counts(t: pa.Table) -> tuple[list[str], list[int]]:
    vc = t.column("shard").value_counts().to_pylist() if t.num_rows else []
    return [d["values"] for d in vc], [d["counts"] for d in vc]


if __name__ == "__main__":
    # run through the importable module, not __main__, so Ray workers unpickle stages and configs by reference
    import pipelines.annotate as _job

    _job.main(parse_job_args(_job.AnnotateConfig, sys.argv[1:], description=__doc__.splitlines()[0]))
