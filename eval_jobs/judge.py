"""A5 judge job: the per-relation protocol and the whole-graph arm as Ray tasks over image shards.

    ray job submit -- python -m eval_jobs.judge --config eval_jobs/configs/judge_synthetic.yaml

Systems are prediction Parquet files (PREDICTIONS_SCHEMA) over the images of one corpus split.
Images are cut into shards with deterministic names (index plus a checksum of their image ids);
one Ray task per shard renders every call (relation claims at both depths, corruptions, graph
comparisons and controls), asks the judge, parses each answer and writes one audit row per call
(prompt, raw answer, verdict) to ``audit/<shard>.parquet`` atomically. A rerun skips finished
shards, so a crashed run resumes without repeating or losing a call. Every reported number is
then recomputed from the audit table: ``result.json`` (Tab. 7 blocks, controls, KT check,
certification, and ``a5`` per system) and the Table-7-style ``table.md``.

Judge calls fail as annotation calls do (the same client retries, the same failure kinds, the
same files, :mod:`pipelines.annotate_shards`): a shard with a call that failed after its retries
has no audit file but ``failures/<shard>.parquet`` (one FAILURES_SCHEMA row per failed call, with
its ``call_id``) and ``pending/<shard>.parquet`` (every call's answer or failure, written last).
Such a run writes no ``result.json``, says INCOMPLETE and exits 3; rerunning the same command
calls the judge again for exactly the failed calls, keeps every earlier answer, and writes the
shard's audit as a run without failures would. ``result.json["run"]`` and the progress line count
this run's calls, retries, failures by kind and the calls retried from earlier runs.

The judge is any VLM backend of :mod:`actors.vlm` (``transformers`` locally, ``openai`` for a
vLLM / ``ray.serve.llm`` server such as the Judge LLM app) or the scripted judge with known
error rates (:mod:`relate.judge.scripted`). Answers are read from their last JSON object within
the backend's token budget (``sampling.max_tokens``, 300 in D.8).

A5 enters OV-SGG-Bench's composite through ``eval_jobs.ovsgg.SystemSpec.a5``: take
``result.json["a5"][system]`` (or :func:`load_a5`); it is null when the judge was not certified.
"""

from __future__ import annotations

import hashlib
import json
import os
import zlib
from collections import Counter
from pathlib import Path
from typing import Any, Literal, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pydantic import Field, model_validator

from actors.vlm.configs import OpenAIConfig, TransformersConfig, VLLMConfig
from relate.config import StrictConfig, dump_config, parse_job_args
from relate.storage import Location, LocationValue
from relate.annotation_stats import format_vlm_line
from relate.jobinfo import Progress, gather, run_name
from relate.placement import ResourcesConfig, ray_remote_args
from relate.judge import (AUDIT_SCHEMA, GraphArmConfig, RelationArmConfig, ScriptedJudgeConfig, audit_table,
                          build_graph_calls, build_relation_calls, parse_graph_verdict, summarise_relation_arm,
                          tally_graph_arm)
from relate.judge.summary import table7_markdown
from relate.judge.protocol import select_deployed, select_matched, select_relative
from pipelines.annotate_shards import atomic_write, read_failures, read_pending, write_incomplete
from pipelines.annotate_stages import STOP_KINDS, call_outcomes, merge_counters

__all__ = ["JudgeSystemSpec", "JudgeBackendConfig", "JudgeJobConfig", "JudgeStopped", "shard_plan", "shard_files",
           "run_shard", "load_audit", "summarise", "load_a5", "main"]


class JudgeStopped(RuntimeError):
    """The judge cannot answer as configured (wrong URL, key or model); what finished is on disk."""


class JudgeSystemSpec(StrictConfig):
    name: str = Field(description="system name in the tables (no '|' or '~')")
    predictions: Location = Field(description="PREDICTIONS_SCHEMA Parquet of this system on the judged split")
    threshold: float | None = Field(None, description="deployed depth: the system's own score threshold")
    vocabulary_size: int | None = Field(None, ge=1, description="KT alphabet: size of the system's declared "
                                        "vocabulary (default: the predicates it actually uses)")

    @model_validator(mode="after")
    def _name(self) -> "JudgeSystemSpec":
        if "|" in self.name or "~" in self.name or "/" in self.name:
            raise ValueError(f"system name {self.name!r} may not contain '|', '~' or '/'")
        return self


class JudgeBackendConfig(StrictConfig):
    """Which judge answers; only the chosen section is used."""

    backend: Literal["scripted", "transformers", "openai", "vllm"] = Field(
        "scripted", description="scripted (known error rates, synthetic world), transformers (local VLM), "
                                "openai (any OpenAI-compatible server: vLLM, the ray.serve.llm Judge app), "
                                "vllm (offline, a ray.data.llm processor over all rendered calls)")
    scripted: ScriptedJudgeConfig = Field(default_factory=ScriptedJudgeConfig, description="scripted judge")
    transformers: TransformersConfig | None = Field(None, description="local transformers VLM (backend=transformers)")
    openai: OpenAIConfig | None = Field(None, description="HTTP server settings (backend=openai)")
    vllm: VLLMConfig | None = Field(None, description="ray.data.llm vLLM processor settings (backend=vllm, GPUs)")

    @model_validator(mode="after")
    def _chosen_present(self) -> "JudgeBackendConfig":
        if self.backend != "scripted" and getattr(self, self.backend) is None:
            raise ValueError(f"judge backend={self.backend!r} needs a '{self.backend}' section")
        return self


class JudgeJobConfig(StrictConfig):
    out_dir: Location = Field("runs/judge", description="run folder: config.yaml, audit/, result.json, table.md")
    corpus: Location = Field(description="corpus root (CORPUS_SCHEMA layout) holding the judged images and their annotation")
    split: str = Field("test", description="split whose images are judged")
    max_images: int | None = Field(None, ge=1, description="judge only the first N images (sorted by id)")
    reference_corpus: LocationValue | None = Field(None, description="corpus whose predicate marginal is Eq. 4's reference "
                                         "(default: the same corpus)")
    reference_split: str = Field("train", description="split of the reference corpus (the training marginal)")
    systems: list[JudgeSystemSpec] = Field(description="systems to judge (Eq. 4's vocabulary is what all emit)")
    relation: RelationArmConfig = Field(default_factory=RelationArmConfig, description="per-relation arm (A5b)")
    graph: GraphArmConfig = Field(default_factory=GraphArmConfig, description="whole-graph arm and certification")
    judge: JudgeBackendConfig = Field(default_factory=JudgeBackendConfig, description="the judge")
    id_base: int = Field(1, ge=0, description="number drawn on the first box")
    kt_min_counts: list[int] = Field(default_factory=lambda: [1, 3, 10], description="KT pooling thresholds")
    a5_requires_certification: bool = Field(True, description="expose A5 only when the graph arm certified the judge")
    images_per_shard: int = Field(8, ge=1, description="images per Ray task (and per audit file)")
    resources: ResourcesConfig = Field(default_factory=ResourcesConfig,
                                       description="what each shard task reserves (give it num_gpus for the "
                                                   "transformers judge on GPU, plus e.g. {evaluator: 1} to keep it on "
                                                   "the evaluation group); with the vllm backend, num_gpus > 0 sizes "
                                                   "each engine and the CPUs size the rendering tasks")
    use_ray: bool = Field(True, description="run shards as Ray tasks (False: in-process, for debugging)")

    @model_validator(mode="after")
    def _consistent(self) -> "JudgeJobConfig":
        names = [s.name for s in self.systems]
        if not names or len(set(names)) != len(names):
            raise ValueError(f"systems must be non-empty with unique names, got {names}")
        if "deployed" in self.relation.depths or (self.graph.enabled and self.graph.depth == "deployed"):
            missing = [s.name for s in self.systems if s.threshold is None]
            if missing:
                raise ValueError(f"deployed depth needs a threshold for system(s) {missing}")
        sampling = getattr(getattr(self.judge, self.judge.backend), "sampling", None)
        if self.graph.enabled and self.graph.votes > 1 and sampling is not None and sampling.temperature == 0:
            raise ValueError(f"graph.votes={self.graph.votes} with greedy decoding gives identical votes; set "
                             f"judge.{self.judge.backend}.sampling.temperature > 0 or graph.votes=1")
        if self.a5_requires_certification and not self.graph.enabled:
            raise ValueError("a5_requires_certification=True needs graph.enabled=True (the controls live there)")
        return self


# --------------------------------------------------------------------------- inputs


def _load_images(cfg: JudgeJobConfig) -> list[dict]:
    from relate.data.corpus import corpus_dir, read_corpus

    table = read_corpus(cfg.corpus, cfg.split)
    base = corpus_dir(cfg.corpus).parent
    rows = []
    for r in table.select(["image_id", "uri", "boxes", "relations"]).to_pylist():
        if len(r["boxes"]) < 2:
            continue  # no pair to judge
        uri = r["uri"] if os.path.isabs(r["uri"]) else str(base / r["uri"])
        rows.append({"image_id": r["image_id"], "uri": uri, "boxes": r["boxes"],
                     "relations": [{"subject": t["subject"], "object": t["object"], "predicate": t["predicate"]}
                                   for t in r["relations"]]})
    rows = rows[: cfg.max_images] if cfg.max_images else rows
    if not rows:
        raise ValueError(f"no judgeable images (>= 2 boxes) in {cfg.corpus} split {cfg.split!r}")
    return rows


def _load_predictions(spec: JudgeSystemSpec, n_boxes: dict[str, int]) -> dict[str, list[dict]]:
    from relate.schema import PREDICTIONS_SCHEMA, to_table, validate_predictions

    if not Path(spec.predictions).is_file():
        raise FileNotFoundError(f"system {spec.name!r}: predictions file {spec.predictions} does not exist")
    table = to_table(pq.read_table(spec.predictions), PREDICTIONS_SCHEMA, table=spec.predictions)
    table = table.filter(pc.is_in(table["image_id"], value_set=pa.array(sorted(n_boxes))))
    validate_predictions(table, n_boxes, name=f"system {spec.name!r} ({spec.predictions})")
    return {r["image_id"]: r["triplets"] for r in table.to_pylist()}


def _reference_counts(cfg: JudgeJobConfig) -> Counter:
    from relate.data.corpus import read_corpus

    table = read_corpus(cfg.reference_corpus or cfg.corpus, cfg.reference_split)
    return Counter(t["predicate"] for rs in table.column("relations").to_pylist() for t in rs)


_RUNTIME_FIELDS = {"out_dir", "use_ray", "resources", "max_images", "images_per_shard"}


def _check_fingerprint(cfg: JudgeJobConfig, audit_dir: Path) -> None:
    """Resume only a run of the same protocol: finished shards of another config would be silently mixed in."""
    body = json.dumps(cfg.model_dump(mode="json", exclude=_RUNTIME_FIELDS), sort_keys=True)
    fp = hashlib.sha1(body.encode()).hexdigest()
    path = audit_dir / "fingerprint.txt"
    if path.exists() and path.read_text().strip() != fp:
        raise ValueError(f"{audit_dir} holds audit shards of a different judge config; "
                         f"use another out_dir or delete that folder to start over")
    path.write_text(fp + "\n")


def shard_plan(image_ids: Sequence[str], per_shard: int) -> list[tuple[str, list[str]]]:
    """Deterministic shard names: index plus a checksum of the ids, so a changed split never reuses a file."""
    ids = sorted(image_ids)
    out = []
    for k in range(0, len(ids), per_shard):
        chunk = ids[k:k + per_shard]
        out.append((f"shard-{k // per_shard:05d}-{zlib.crc32(chr(10).join(chunk).encode()):08x}", chunk))
    return out


# --------------------------------------------------------------------------- one shard (Ray task body)


def _create_judge(cfg: JudgeBackendConfig) -> Any:
    if cfg.backend == "scripted":
        from relate.judge import ScriptedJudge

        return ScriptedJudge(cfg.scripted)
    from actors.vlm.base import create_backend
    from actors.vlm.configs import VLMConfig

    return create_backend(VLMConfig(backend=cfg.backend, **{cfg.backend: getattr(cfg, cfg.backend)}))


def _graphs(cfg: JudgeJobConfig, preds: dict[str, list[dict]], n_boxes: int) -> dict[str, list[dict]]:
    out = {}
    for s in cfg.systems:
        tri = preds.get(s.name, [])
        if cfg.graph.depth == "relative":
            g = select_relative(tri, cfg.graph.relative_fraction, cfg.graph.max_relations)
        elif cfg.graph.depth == "matched":
            g = select_matched(tri, cfg.relation.matched_k)
        else:
            g = select_deployed(tri, s.threshold, cfg.relation.deployed_max)
        out[s.name] = [r for r in g if r["subject"] < n_boxes and r["object"] < n_boxes]
    return out


def _calls_for_image(cfg: JudgeJobConfig, image: dict, preds: dict[str, list[dict]]) -> list:
    from relate.markers import boxes_array, decode_image

    pixels = decode_image(Path(image["uri"]).read_bytes())
    boxes = boxes_array(image["boxes"])
    thresholds = {s.name: s.threshold for s in cfg.systems}
    systems = {s.name: preds.get(s.name, []) for s in cfg.systems}
    calls = build_relation_calls(image["image_id"], pixels, boxes, systems, thresholds, cfg.relation,
                                 truth=image["relations"], id_base=cfg.id_base)
    if cfg.graph.enabled:
        cats = [b.get("category") for b in image["boxes"]]
        calls += build_graph_calls(image["image_id"], pixels, boxes, cats, _graphs(cfg, preds, len(boxes)),
                                   cfg.graph, truth=image["relations"], id_base=cfg.id_base)
    return calls


def _verdict(arm: str, text: str | None) -> str | None:
    from actors.judge import parse_verdict  # the per-relation reader of the Judge deployment

    if arm == "graph":
        return parse_graph_verdict(text)
    v = parse_verdict(text)
    return None if v is None else ("yes" if v else "no")


def render_shard(cfg_dict: dict, images: list[dict], preds: dict[str, dict[str, list[dict]]]) -> list[dict]:
    """Every call of a shard, rendered: audit fields, prompt, PNG bytes and their sha1, scripted context."""
    from relate.markers import encode_png

    cfg = JudgeJobConfig.model_validate(cfg_dict)
    out = []
    for im in images:
        calls = _calls_for_image(cfg, im, {s: p.get(im["image_id"], []) for s, p in preds.items()})
        pngs: dict[int, tuple[bytes, str]] = {}
        for c in calls:
            if id(c.image) not in pngs:  # graph calls of one image share a rendering
                png = encode_png(c.image)
                pngs[id(c.image)] = (png, hashlib.sha1(png).hexdigest())
            png, sha = pngs[id(c.image)]
            out.append({"record": c.record, "prompt": c.prompt, "image_png": png, "image_sha1": sha,
                        "context": c.context, "uri": im["uri"]})
    return out


def shard_files(out_dir: str | Path, shard: str) -> tuple[Path, Path, Path]:
    """A shard's audit (its presence marks the shard done), failures and pending-state files."""
    out = Path(out_dir)
    return out / "audit" / f"{shard}.parquet", out / "failures" / f"{shard}.parquet", out / "pending" / f"{shard}.parquet"


def earlier_calls(out_dir: str | Path, shard: str) -> dict[str, dict]:
    """How an earlier run left an incomplete shard: call id -> ``{"answer": text}`` or ``{"failure": {...}}``."""
    return {r["call_id"]: r for r in read_pending(shard_files(out_dir, shard)[2]) or []}


def calls_to_make(rendered: list[dict], earlier: dict[str, dict]) -> list[dict]:
    """The rendered calls without an answer from an earlier run: all of a fresh shard, the failed
    ones of a shard an earlier run left incomplete."""
    return [r for r in rendered if "answer" not in earlier.get(r["record"]["call_id"], {})]


def write_shard(out_dir: str | Path, shard: str, rendered: list[dict], outcomes: dict[str, Any],
                earlier: dict[str, dict]) -> dict:
    """Merge this run's outcomes (call id -> :class:`actors.vlm.base.VLMOutcome`) with the answers
    an earlier run kept, then write the shard: its audit rows atomically when every call has an
    answer (and drop its failures and pending state), else its failures and pending state.
    Returns the shard's counts (calls, this run's VLM counters, failures by kind, retried calls)."""
    audit_path, fail_path, pending_path = shard_files(out_dir, shard)
    rows, state, failures, vlm = [], [], [], {}
    retried = 0
    for r in rendered:
        rec = r["record"]
        cid, before = rec["call_id"], earlier.get(rec["call_id"], {})
        if cid in outcomes:
            o, pass_name = outcomes[cid], f"judge_{rec['arm']}"
            retried += "failure" in before
            vlm = merge_counters(vlm, {"calls": {pass_name: 1}, "attempts": o.attempts, "retries": max(o.attempts - 1, 0),
                                       **({} if o.ok else {"failed_calls": {o.kind: 1}})})
            if not o.ok:
                attempts = o.attempts + int(before.get("failure", {}).get("attempts", 0))  # over all runs
                failures.append({"image_id": rec["image_id"], "uri": r["uri"], "shard": shard, "pass": pass_name,
                                 "kind": o.kind, "message": o.message or "", "attempts": attempts, "call_id": cid})
                state.append((rec["image_id"], True, {"call_id": cid, "failure": {"kind": o.kind, "attempts": attempts}}))
                continue
            text = o.text
        elif "answer" in before:
            text = before["answer"]
        else:
            raise RuntimeError(f"{shard}: call {cid} has neither an answer from this run nor one from an earlier run")
        state.append((rec["image_id"], False, {"call_id": cid, "answer": text}))
        rows.append({**rec, "prompt": r["prompt"], "image_sha1": r["image_sha1"], "raw_answer": text,
                     "verdict": _verdict(rec["arm"], text)})
    counts = {"shard": shard, "calls": len(rendered), "made": len(outcomes), "retried": retried,
              "kept": len(rendered) - len(outcomes), "vlm": vlm, "complete": not failures,
              "failed": dict(Counter(f["kind"] for f in failures)),
              "unparseable": sum(r["verdict"] is None for r in rows)}
    if failures:
        write_incomplete(fail_path, pending_path, failures, state)
        return counts
    table = audit_table(rows)
    atomic_write(audit_path, lambda p: pq.write_table(table, p))  # a file holds the whole shard or does not exist
    pending_path.unlink(missing_ok=True)  # after the audit: a crash in between leaves state the driver drops
    fail_path.unlink(missing_ok=True)
    return counts


def run_shard(cfg_dict: dict, shard: str, images: list[dict], preds: dict[str, dict[str, list[dict]]],
              out_dir: str) -> dict:
    """Render one shard, judge its calls an earlier run has no answer for (in-process backend),
    parse and write it (see :func:`write_shard`)."""
    from actors.vlm.base import VLMRequest

    cfg = JudgeJobConfig.model_validate(cfg_dict)
    rendered = render_shard(cfg_dict, images, preds)
    earlier = earlier_calls(out_dir, shard)
    todo = calls_to_make(rendered, earlier)
    requests = [VLMRequest(image_png=r["image_png"], prompt=r["prompt"], image_id=r["record"]["image_id"],
                           pass_name=f"judge_{r['record']['arm']}", reference=(r["context"],), id_base=cfg.id_base)
                for r in todo]
    outs = call_outcomes(_create_judge(cfg.judge), requests) if requests else []
    if len(outs) != len(todo):
        raise RuntimeError(f"{shard}: judge returned {len(outs)} outcomes for {len(todo)} calls")
    return write_shard(out_dir, shard, rendered, {r["record"]["call_id"]: o for r, o in zip(todo, outs)}, earlier)


# --------------------------------------------------------------------------- driver


def _run_shards(cfg: JudgeJobConfig, plan: list, images: dict, preds: dict, progress: "_CallProgress") -> list[dict]:
    out = str(cfg.out_dir)
    todo = [(name, ids) for name, ids in plan if not shard_files(out, name)[0].exists()]
    args = [(cfg.model_dump(mode="json"), name, [images[i] for i in ids],
             {s: {i: p[i] for i in ids if i in p} for s, p in preds.items()}, out)
            for name, ids in todo]
    progress.start(len(args))
    if cfg.judge.backend == "vllm":
        return _run_vllm(cfg, args, progress)
    if not cfg.use_ray:
        return [progress.done(run_shard(*a)) for a in args]
    import ray

    if not ray.is_initialized():
        ray.init()
    name = run_name("judge", cfg.out_dir)
    task = ray.remote(**ray_remote_args(cfg.resources))(run_shard)
    refs = [task.options(name=f"{name}:shard:{a[1]}").remote(*a) for a in args]
    waiting = list(refs)
    while waiting:  # one progress line per finished shard, with the calls, retries and failures so far
        ready, waiting = ray.wait(waiting, num_returns=1)
        progress.done(ray.get(ready[0]))
    return ray.get(refs)


class _CallProgress:
    """``[judge-run] shards 3/9 (33%) ... | calls 120, retries 9, failed 4 (timeout 3, http_500 1),
    outstanding 4 | retried from earlier runs 2`` (the annotation job's VLM line)."""

    def __init__(self, name: str) -> None:
        self.name, self.vlm, self.retried, self.outstanding = name, {}, 0, Counter()
        self.progress: Progress | None = None

    def start(self, total: int) -> None:
        self.progress = Progress(self.name, "shards", total, emit=lambda line: print(f"{line} | {self.line()}", flush=True))

    def line(self) -> str:
        return f"{format_vlm_line(self.stats())} | retried from earlier runs {self.retried}"

    def stats(self) -> dict:
        from relate.annotation_stats import vlm_call_stats

        return vlm_call_stats({"vlm": self.vlm}, dict(self.outstanding))

    def done(self, counts: dict) -> dict:
        self.vlm = merge_counters(self.vlm, counts["vlm"])
        self.retried += counts["retried"]
        self.outstanding.update(counts["failed"])
        self.progress.update()
        return counts


def _run_vllm(cfg: JudgeJobConfig, args: list[tuple], progress: _CallProgress) -> list[dict]:
    """Offline GPU path: render shards as CPU tasks, answer every call without an earlier answer in
    one ray.data.llm pass (engine errors are recorded failures), write the shards."""
    import ray

    from actors.vlm.base import VLMOutcome
    from actors.vlm.vllm_data import ATTEMPTS_COLUMN, ERROR_COLUMN, TEXT_COLUMN, build_vllm_processor, vllm_outcomes
    from relate.prompts import load_prompt

    if not args:
        return []
    name = run_name("judge", cfg.out_dir)
    render = ray.remote(num_cpus=cfg.resources.num_cpus)(render_shard)
    refs = [render.options(name=f"{name}:render:{shard}").remote(c, imgs, preds) for c, shard, imgs, preds, _ in args]
    rendered = gather(ray, refs, Progress(name, "shards rendered", len(refs)))
    earlier = {shard: earlier_calls(out, shard) for _, shard, _, _, out in args}
    todo = [r for (_, shard, _, _, _), rs in zip(args, rendered) for r in calls_to_make(rs, earlier[shard])]
    items = [{"call_id": r["record"]["call_id"], "prompt": r["prompt"], "image_png": r["image_png"]} for r in todo]
    keep = (("call_id", pa.string()), (TEXT_COLUMN, pa.string()), (ERROR_COLUMN, pa.string()), (ATTEMPTS_COLUMN, pa.int64()))

    def outcomes(batch: pa.Table) -> pa.Table:  # engine errors -> recorded failures, one layout for all rows
        return pa.Table.from_pylist([{k: r[k] for k, _ in keep} for r in vllm_outcomes(batch)], schema=pa.schema(keep))

    rows = []
    if items:
        processor = build_vllm_processor(cfg.judge.vllm, cfg.resources if cfg.resources.num_gpus else None,
                                         load_prompt("system_judge").text, cfg.resources.num_cpus)
        rows = processor(ray.data.from_items(items)).map_batches(outcomes, batch_format="pyarrow").take_all()
    outs = {}
    for row in rows:
        err = json.loads(row[ERROR_COLUMN]) if row[ERROR_COLUMN] else None
        outs[row["call_id"]] = (VLMOutcome(row[TEXT_COLUMN], int(row[ATTEMPTS_COLUMN] or 1)) if err is None else
                                VLMOutcome(None, int(row[ATTEMPTS_COLUMN] or 1), err["kind"], err.get("message", "")))
    lost = {i["call_id"] for i in items} - set(outs)
    if lost:
        raise RuntimeError(f"[{name}] the vLLM processor returned no row for {len(lost)} of {len(items)} calls "
                           f"(e.g. {sorted(lost)[0]}); nothing of them was written, rerun the same command")
    return [progress.done(write_shard(out, shard, rs, {r["record"]["call_id"]: outs[r["record"]["call_id"]]
                                                       for r in rs if r["record"]["call_id"] in outs}, earlier[shard]))
            for (_, shard, _, _, out), rs in zip(args, rendered)]


def load_audit(out_dir: str | Path) -> pa.Table:
    """Every audit row of a run (all shards), in call-id order."""
    files = sorted((Path(out_dir) / "audit").glob("shard-*.parquet"))
    if not files:
        raise FileNotFoundError(f"no audit shards under {out_dir}/audit")
    return pa.concat_tables([pq.read_table(f, schema=AUDIT_SCHEMA) for f in files]).sort_by("call_id")


def summarise(cfg: JudgeJobConfig, rows: list[dict], images: dict, reference: Counter) -> dict:
    names = [s.name for s in cfg.systems]
    gt = {i: images[i]["relations"] for i in sorted(images)}
    relation = summarise_relation_arm(rows, reference, gt, names, cfg.kt_min_counts,
                                      {s.name: s.vocabulary_size for s in cfg.systems})
    graph = tally_graph_arm(rows, cfg.graph) if cfg.graph.enabled else None
    usable = graph["certified"] if (graph is not None and cfg.a5_requires_certification) else True
    return {"a5": {s: (v if usable else None) for s, v in relation["a5"].items()},
            "a5_depth": relation["a5_depth"], "a5_status": "scored" if usable else "uncertified judge: not scored",
            "judge": cfg.judge.backend, "rendering": cfg.relation.rendering,
            "calls": {"total": len(rows), "unparseable": sum(r["verdict"] is None for r in rows),
                      "by_arm": dict(Counter(r["arm"] for r in rows))},
            "relation": relation, "graph": graph}


def main(cfg: JudgeJobConfig) -> dict:
    """Run (or resume) the judge over every shard; returns the result also written to result.json.

    When calls failed after their retries the result has ``complete: False``, no result.json is
    written, and the failed calls are listed under ``failures/``: rerun the same config to retry
    exactly them. Raises :class:`JudgeStopped` when the judge refused as misconfigured (401/403/404).
    """
    out = Path(cfg.out_dir)
    audit_dir = out / "audit"
    audit_dir.mkdir(parents=True, exist_ok=True)
    _check_fingerprint(cfg, audit_dir)
    dump_config(cfg, out / "config.yaml")
    for stale in out.rglob(".*.tmp-*"):  # half-written files of a killed run: never read, drop them
        stale.unlink(missing_ok=True)
    images = {im["image_id"]: im for im in _load_images(cfg)}
    n_boxes = {i: len(im["boxes"]) for i, im in images.items()}
    preds = {s.name: _load_predictions(s, n_boxes) for s in cfg.systems}
    plan = shard_plan(list(images), cfg.images_per_shard)
    for name, _ in plan:  # a run killed between writing a shard's audit and dropping its state left these
        audit, fail, pending = shard_files(out, name)
        if audit.exists():
            fail.unlink(missing_ok=True)
            pending.unlink(missing_ok=True)
    progress = _CallProgress(run_name("judge", cfg.out_dir))
    ran = _run_shards(cfg, plan, images, preds, progress)
    fails = read_failures(out, [shard_files(out, name)[1] for name, _ in plan])
    run = {"vlm": progress.stats(), "calls_made": sum(r["made"] for r in ran),
           "calls_retried": progress.retried, "answers_kept": sum(r["kept"] for r in ran)}
    shards = {"planned": len(plan), "ran": len(ran), "skipped": len(plan) - len(ran),
              "incomplete": len({f for f in fails.column("shard").to_pylist()})}
    print(f"[{progress.name}] this run: {progress.line()}; {run['answers_kept']} answers kept from earlier runs", flush=True)
    fatal = [f for f in fails.to_pylist() if f["kind"] in STOP_KINDS]
    if fatal:
        raise JudgeStopped(f"judge stopped: {fatal[0]['message']}. {len(plan) - shards['incomplete']} shards are "
                           f"complete under {audit_dir}; {fails.num_rows} calls are listed in {out / 'failures'}. Fix "
                           f"the cause and rerun the same command: it judges only what is missing")
    if fails.num_rows:
        for name in ("result.json", "table.md"):  # a partial audit scores nothing
            (out / name).unlink(missing_ok=True)
        print(f"[{progress.name}] INCOMPLETE: {fails.num_rows} judge calls failed after their retries "
              f"({dict(Counter(fails.column('kind').to_pylist()))}) in {shards['incomplete']} shards; listed in "
              f"{out / 'failures'}; rerun the same command to retry exactly those calls", flush=True)
        return {"complete": False, "shards": shards, "run": run, "failures": fails.num_rows}
    table = pa.concat_tables([pq.read_table(shard_files(out, name)[0], schema=AUDIT_SCHEMA) for name, _ in plan])
    result = summarise(cfg, table.to_pylist(), images, _reference_counts(cfg))
    result.update(complete=True, shards=shards, run=run)
    (out / "result.json").write_text(json.dumps(result, indent=1, default=_json_default))
    (out / "table.md").write_text(table7_markdown(result))
    return result


def load_a5(path: str | Path, system: str) -> float | None:
    """The A5 cell of ``system`` from a judge run (folder or result.json): null when not scored."""
    p = Path(path)
    if p.is_dir() and not (p / "result.json").exists() and list((p / "failures").glob("*.parquet")):
        raise FileNotFoundError(f"judge run {p} is incomplete: {read_failures(p).num_rows} failed calls are listed in "
                                f"{p / 'failures'}; rerun the judge with the same config to retry them")
    result = json.loads((p / "result.json" if p.is_dir() else p).read_text())
    if system not in result["a5"]:
        raise KeyError(f"system {system!r} not in judge run {path}; have {sorted(result['a5'])}")
    return result["a5"][system]


def _json_default(x: Any) -> Any:
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


if __name__ == "__main__":
    # run through the importable module, not __main__, so Ray workers can unpickle the task and config
    import eval_jobs.judge as _job

    _res = _job.main(parse_job_args(_job.JudgeJobConfig, description="A5: judged graph quality (Eq. 4) with controls"))
    if not _res["complete"]:
        raise SystemExit(3)  # failed calls are listed; a nonzero exit makes the job show it
    print(table7_markdown(_res))
