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
this run's calls, retries, failures by kind and the calls retried from earlier runs. A judge that
is down stops the run early: past ``max_consecutive_failures`` failed calls in a row in a worker
process (or at once on a 401/403/404) that process makes no more calls; they are recorded as
``vlm_unavailable`` and the run raises :class:`JudgeStopped` (:mod:`eval_jobs.judge_shard` has
the shard task and the breaker).

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
import uuid
import zlib
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from relate.config import dump_config, parse_job_args
from relate.annotation_stats import format_vlm_line
from relate.jobinfo import Progress, gather, run_name
from relate.data.corpus import require_corpus
from relate.job_inputs import MAKE_WORLD, require_path
from relate.placement import ray_remote_args
from relate.judge import AUDIT_SCHEMA, summarise_relation_arm, tally_graph_arm
from relate.judge.summary import table7_markdown
from pipelines.annotate_shards import read_failures
from eval_jobs.judge_config import JudgeBackendConfig, JudgeJobConfig, JudgeSystemSpec
from eval_jobs.judge_shard import calls_to_make, earlier_calls, render_shard, run_shard, shard_files, write_shard
from pipelines.annotate_stages import merge_counters
from pipelines.vlm_calls import STOP_KINDS

__all__ = ["JudgeSystemSpec", "JudgeBackendConfig", "JudgeJobConfig", "JudgeStopped", "shard_plan", "shard_files",
           "run_shard", "load_audit", "summarise", "load_a5", "main"]


class JudgeStopped(RuntimeError):
    """The judge cannot answer as configured (wrong URL, key or model) or is down (calls failing in a
    row); what finished is on disk, and a rerun asks only what is missing."""


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


_RUNTIME_FIELDS = {"out_dir", "use_ray", "resources", "max_images", "images_per_shard", "max_consecutive_failures"}


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


# --------------------------------------------------------------------------- driver


def _run_shards(cfg: JudgeJobConfig, plan: list, images: dict, preds: dict, progress: "_CallProgress") -> list[dict]:
    out = str(cfg.out_dir)
    todo = [(name, ids) for name, ids in plan if not shard_files(out, name)[0].exists()]
    args = [(cfg.model_dump(mode="json"), name, [images[i] for i in ids],
             {s: {i: p[i] for i in ids if i in p} for s, p in preds.items()}, out)
            for name, ids in todo]
    progress.start(len(args))
    run_id = uuid.uuid4().hex  # each run's breakers start closed, in every process
    if cfg.judge.backend == "vllm":
        return _run_vllm(cfg, args, progress)
    if not cfg.use_ray:
        return [progress.done(run_shard(*a, run_id=run_id)) for a in args]
    import ray

    if not ray.is_initialized():
        ray.init()
    name = run_name("judge", cfg.out_dir)
    task = ray.remote(**ray_remote_args(cfg.resources))(run_shard)
    refs = [task.options(name=f"{name}:shard:{a[1]}").remote(*a, run_id=run_id) for a in args]
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


_MAKE_SYSTEMS = ("python -m relate.judge.synthetic_systems --corpus runs/demo/synthetic --out runs/judge_systems (the "
                 "synthetic world's two systems), or a system's predictions (docs/jobs/evaluation.md)")


def main(cfg: JudgeJobConfig) -> dict:
    """Run (or resume) the judge over every shard; returns the result also written to result.json.

    When calls failed after their retries the result has ``complete: False``, no result.json is
    written, and the failed calls are listed under ``failures/``: rerun the same config to retry
    exactly them. Raises :class:`JudgeStopped` when the judge refused as misconfigured (401/403/404)
    or ``max_consecutive_failures`` calls failed in a row.
    """
    require_corpus(cfg.corpus, "judged corpus (corpus)", MAKE_WORLD, splits=[cfg.split])  # missing: one line
    for s in cfg.systems:
        require_path(s.predictions, f"predictions (systems.{s.name}.predictions)", _MAKE_SYSTEMS)
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
