"""One judge shard, the body of a Ray task (see :mod:`eval_jobs.judge` for the job): render its
calls, ask the judge for those no earlier run answered, and write the shard's audit, or its
failures and pending state.

Consecutive failures are counted per run and worker process, across the shards that process
judges (Ray reuses a task's worker), as the annotation job counts them per actor: past
``max_consecutive_failures`` failed calls in a row, or at once on a configuration error
(401/403/404), the breaker trips and the process makes no more calls for this run. The calls it
does not make are recorded as ``vlm_unavailable`` failures (made 0 times), so the driver stops the
run (``JudgeStopped``) and a rerun asks exactly them.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from eval_jobs.judge_config import JudgeBackendConfig, JudgeJobConfig
from pipelines.annotate_shards import atomic_write, read_pending, write_incomplete
from pipelines.annotate_stages import merge_counters
from pipelines.vlm_calls import UNAVAILABLE, CallBreaker, call_outcomes
from relate.judge import audit_table, build_graph_calls, build_relation_calls, parse_graph_verdict
from relate.judge.protocol import select_deployed, select_matched, select_relative

__all__ = ["render_shard", "shard_files", "earlier_calls", "calls_to_make", "write_shard", "run_shard"]


def _config(cfg_dict: dict) -> JudgeJobConfig:
    return JudgeJobConfig.model_validate(cfg_dict)


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

    cfg = _config(cfg_dict)
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
            made = o.kind != UNAVAILABLE  # not made: the breaker had tripped
            retried += made and "failure" in before
            tally = {"calls": {pass_name: 1}, "attempts": o.attempts, "retries": max(o.attempts - 1, 0),
                     **({} if o.ok else {"failed_calls": {o.kind: 1}})}
            vlm = merge_counters(vlm, tally if made else {"skipped_calls": 1})
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
    skipped = sum(o.kind == UNAVAILABLE for o in outcomes.values())
    counts = {"shard": shard, "calls": len(rendered), "made": len(outcomes) - skipped, "skipped": skipped,
              "retried": retried,
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


_BREAKERS: dict[str, CallBreaker] = {}  # run id -> this process's breaker for that run


def _judge_calls(cfg: JudgeJobConfig, requests: list, breaker: CallBreaker) -> list:
    """Outcomes of ``requests`` in order, asked in chunks of ``max_consecutive_failures`` so that a
    tripped breaker stops the calls within a shard too; the calls after the trip are not made."""
    from actors.vlm.base import VLMOutcome

    step = cfg.max_consecutive_failures or len(requests)
    outs, backend = [], None
    for start in range(0, len(requests), step):
        chunk = requests[start:start + step]
        if breaker.tripped:
            outs += [VLMOutcome(None, 0, UNAVAILABLE, breaker.tripped) for _ in chunk]
            continue
        backend = backend or _create_judge(cfg.judge)
        got = call_outcomes(backend, chunk)
        for o in got:
            breaker.record(not o.ok, o.kind or "", o.message or "")
        outs += got
    return outs


def run_shard(cfg_dict: dict, shard: str, images: list[dict], preds: dict[str, dict[str, list[dict]]],
              out_dir: str, run_id: str = "") -> dict:
    """Render one shard, judge its calls an earlier run has no answer for (in-process backend),
    parse and write it (see :func:`write_shard`). ``run_id`` names the run whose breaker counts
    this process's consecutive failures (see the module docstring)."""
    from actors.vlm.base import VLMRequest

    cfg = _config(cfg_dict)
    rendered = render_shard(cfg_dict, images, preds)
    earlier = earlier_calls(out_dir, shard)
    todo = calls_to_make(rendered, earlier)
    requests = [VLMRequest(image_png=r["image_png"], prompt=r["prompt"], image_id=r["record"]["image_id"],
                           pass_name=f"judge_{r['record']['arm']}", reference=(r["context"],), id_base=cfg.id_base)
                for r in todo]
    breaker = _BREAKERS.setdefault(run_id, CallBreaker(cfg.max_consecutive_failures))
    outs = _judge_calls(cfg, requests, breaker) if requests else []
    if len(outs) != len(todo):
        raise RuntimeError(f"{shard}: judge returned {len(outs)} outcomes for {len(todo)} calls")
    return write_shard(out_dir, shard, rendered, {r["record"]["call_id"]: o for r, o in zip(todo, outs)}, earlier)
