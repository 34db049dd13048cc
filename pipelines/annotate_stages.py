"""Ray Data stages of the annotation pipeline (seed 001, §4.1, App. C), as plain callable classes.

Each stage takes and returns a ``pyarrow.Table`` batch, declares the columns it needs, and works
on a table built from a list of dicts in a unit test. Between stages the per-image candidate
relations travel as a JSON string column (``cands_json``), so blocks never disagree on nested
types when a batch happens to have no relations at all.

Nothing is dropped on the way. An image that cannot be read carries ``image_error`` (rule and
message) past the VLM passes and leaves the gate as an image-level rejection. A VLM call that
fails after its retries sets ``failure_json`` (pass, kind, message, attempts): later passes skip
the row and the gate passes it through with its state (``cands_json``, ``counters_json``), so a
rerun resumes it at the failed pass (``resume_from``) and repeats no call that succeeded.
"""

from __future__ import annotations

import json
import time
from typing import Sequence

import numpy as np
import pyarrow as pa

from actors.vlm.base import (BUSY_COLUMN, COMPLETION_TOKENS_COLUMN, LATENCY_COLUMN, PROMPT_TOKENS_COLUMN, VLMOutcome,
                             VLMRequest, create_backend)
from actors.vlm.configs import VLMConfig
from actors.vlm.vllm_data import ATTEMPTS_COLUMN, ERROR_COLUMN, TEXT_COLUMN
from pipelines.annotate_images import ImageProblem, check_boxes, load_checked_image
from pipelines.vlm_calls import UNAVAILABLE, CallBreaker, call_outcomes, call_usage
from relate.gate import (BoxTable, Candidates, GateConfig, GateResult, TopUpConfig, gate_relations,
                         topup_candidates)
from relate.gate_canonical import default_map
from relate.markers import draw_markers, encode_png
from relate.parsing import OUTPUT_REASONS, parse_relations
from relate.pair_sample import sample_pairs
from relate.prompts import draft_list, load_prompt, object_list, pair_list
from relate.schema import BOX_TYPE, PAIR_TYPE, PASSES, REJECTION_TYPE, RELATION_TYPE

__all__ = ["MarkStage", "PromptStage", "GenerateStage", "ParseStage", "PassesStage", "GateStage", "rows_to_table",
           "merge_counters", "VLM_PASSES", "PAIRS_PASS", "PASS_ORDER", "image_rejection"]

VLM_PASSES = ("semantic", "grow", "spatial")  # every image's passes, in the order they run
PAIRS_PASS = "pairs"  # one more, when asked for (AnnotateConfig.pairs_per_image)
PASS_ORDER = VLM_PASSES + (PAIRS_PASS,)
_EXTRA_TYPES = {"image_png": pa.binary(), "prompt": pa.string(), TEXT_COLUMN: pa.string(),
                "cands_json": pa.string(), "counters_json": pa.string(), "shard": pa.string(),
                "relations": pa.list_(RELATION_TYPE), "rejected": pa.list_(REJECTION_TYPE),
                "reference": pa.list_(RELATION_TYPE), "boxes": pa.list_(BOX_TYPE), "image_error": pa.string(),
                "failure_json": pa.string(), "run_vlm_json": pa.string(), "resume_from": pa.int32(), "attempts_before": pa.int32(),
                "pairs_json": pa.string(), "asked_pairs": pa.list_(PAIR_TYPE),
                ERROR_COLUMN: pa.string(), ATTEMPTS_COLUMN: pa.int32(), PROMPT_TOKENS_COLUMN: pa.int64(),
                COMPLETION_TOKENS_COLUMN: pa.int64(), LATENCY_COLUMN: pa.float64(), BUSY_COLUMN: pa.float64()}
_CALL_COLUMNS = (PROMPT_TOKENS_COLUMN, COMPLETION_TOKENS_COLUMN, LATENCY_COLUMN, BUSY_COLUMN)


def _active(row: dict, pass_name: str) -> bool:
    """Does this row still need ``pass_name``? Not when its image failed, an earlier call failed,
    or (on a rerun) the pass already succeeded before."""
    return (not row.get("image_error") and not row.get("failure_json")
            and PASS_ORDER.index(pass_name) >= (row.get("resume_from") or 0))


def image_rejection(error_json: str) -> dict:
    """The rejection row of an image that could not be annotated (no relation: indices -1, the
    message in ``predicate`` so the file and the fault travel with the rule)."""
    e = json.loads(error_json)
    return dict(subject=-1, object=-1, predicate=e["message"], rule=e["rule"], **{"pass": VLM_PASSES[0]})


def rows_to_table(rows: list[dict], like: pa.Schema) -> pa.Table:
    """Rows -> table, typing known columns explicitly (empty lists stay well-typed)."""
    names = list(dict.fromkeys(k for r in rows for k in r)) if rows else [f.name for f in like]  # rows may differ
    fields = []
    for n in names:
        if n in _EXTRA_TYPES:
            fields.append(pa.field(n, _EXTRA_TYPES[n]))
        elif n in like.names:
            fields.append(like.field(n))
        else:
            fields.append(pa.field(n, pa.string()))
    return pa.Table.from_pylist(rows, schema=pa.schema(fields))


def merge_counters(a: dict, b: dict) -> dict:
    """Sum nested dicts of counts (the per-image / per-shard statistics)."""
    out = dict(a)
    for k, v in b.items():
        if isinstance(v, dict):
            out[k] = merge_counters(out.get(k, {}), v)
        else:
            out[k] = out.get(k, 0) + v
    return out


class MarkStage:
    """Load each image, optionally add labelled duplicate person boxes, draw numbered markers.

    Needs ``uri, boxes``; adds ``image_png``. The duplicate-box noise exists only to exercise the
    person-duplicate gate on the synthetic world (real detector output has such boxes).
    """

    def __init__(self, id_base: int = 1, outlines: bool = False, duplicate_person_rate: float = 0.0, seed: int = 0) -> None:
        self.id_base, self.outlines, self.dup_rate, self.seed = id_base, outlines, duplicate_person_rate, seed

    def _noise(self, row: dict) -> None:
        import zlib

        rng = np.random.default_rng([self.seed, zlib.crc32(row["image_id"].encode()), 7])
        people = [b for b in row["boxes"] if b["is_person"]]
        if not people or rng.random() >= self.dup_rate:
            return
        b = people[int(rng.integers(len(people)))]
        w, h = b["x2"] - b["x1"], b["y2"] - b["y1"]
        dx, dy = rng.uniform(-0.04, 0.04) * w, rng.uniform(-0.04, 0.04) * h
        x1, y1 = max(0.0, b["x1"] + dx), max(0.0, b["y1"] + dy)
        x2, y2 = min(float(row["width"]), b["x2"] + dx), min(float(row["height"]), b["y2"] + dy)
        row["boxes"] = list(row["boxes"]) + [dict(b, x1=x1, y1=y1, x2=x2, y2=y2)]

    def __call__(self, batch: pa.Table) -> pa.Table:
        rows = batch.to_pylist()
        for row in rows:
            row.setdefault("cands_json", "[]")
            row.setdefault("counters_json", "{}")
            row["run_vlm_json"] = "{}"  # this run's calls only (counters_json also holds earlier runs')
            try:
                pixels = load_checked_image(row["uri"], row.get("width"), row.get("height"))
                row["height"], row["width"] = int(pixels.shape[0]), int(pixels.shape[1])
                check_boxes(row["uri"], row["boxes"], row["width"], row["height"])
            except ImageProblem as exc:
                row["image_error"] = json.dumps({"rule": exc.rule, "message": exc.message})
                row["image_png"] = b""
                continue
            row["image_error"] = None
            if self.dup_rate > 0:
                self._noise(row)
            row["image_png"] = encode_png(draw_markers(pixels, row["boxes"], id_base=self.id_base, outlines=self.outlines))
        return rows_to_table(rows, batch.schema)


def _cands(row: dict) -> list[dict]:
    return json.loads(row.get("cands_json") or "[]")


def _draft(row: dict) -> list[tuple[int, str, int]]:
    n = len(row["boxes"])
    return [(c["s"], c["p"], c["o"]) for c in _cands(row) if 0 <= c["s"] < n and 0 <= c["o"] < n]


def _asked(row: dict) -> list[tuple[int, int]]:
    return [tuple(p) for p in json.loads(row.get("pairs_json") or "[]")]


class PromptStage:
    """Render the pass's prompt for each image (needs ``boxes, cands_json``; adds ``prompt``). The
    pairs pass also draws the image's pairs (``relate.pair_sample``: ``pairs_per_image`` of them,
    from ``seed``) and keeps them in ``pairs_json`` for the later stages."""

    def __init__(self, pass_name: str, id_base: int = 1, prompt_dir: str | None = None, pairs_per_image: int = 0,
                 seed: int = 0) -> None:
        if pass_name not in PASS_ORDER:
            raise ValueError(f"unknown pass {pass_name!r}; valid: {list(PASS_ORDER)}")
        self.pass_name, self.id_base, self.k, self.seed = pass_name, id_base, pairs_per_image, seed
        self.template = load_prompt(pass_name, prompt_dir)

    def __call__(self, batch: pa.Table) -> pa.Table:
        rows = batch.to_pylist()
        for row in rows:
            if not _active(row, self.pass_name):
                row["prompt"] = ""
                continue
            cats = [b["category"] for b in row["boxes"]]
            values = dict(n=len(cats), object_list=object_list(cats, self.id_base))
            if "draft" in self.template.fields:
                values["draft"] = draft_list(_draft(row), cats, self.id_base)
            if "pairs" in self.template.fields:
                pairs = sample_pairs(row["image_id"], row["boxes"], self.k, self.seed)
                row["pairs_json"] = json.dumps(pairs)
                values["pairs"] = pair_list(pairs, cats, self.id_base)
            row["prompt"] = self.template.render(**values)
        return rows_to_table(rows, batch.schema)


class GenerateStage:
    """Call the configured backend once per batch (needs ``image_png, prompt``; adds ``vlm_text``).

    Heavy state (a model, an HTTP pool) is created once in ``__init__``; Ray Data runs this class
    in an actor pool with the concurrency and CPUs/GPUs the config gives.
    """

    _shared: dict = {}

    def __init__(self, vlm: VLMConfig | dict, pass_name: str, id_base: int = 1, breaker: "CallBreaker | None" = None) -> None:
        self.cfg = vlm if isinstance(vlm, VLMConfig) else VLMConfig.model_validate(vlm)
        key = self.cfg.model_dump_json()
        if key not in GenerateStage._shared:  # one model per process, shared by the passes
            GenerateStage._shared[key] = create_backend(self.cfg)
        self.backend = GenerateStage._shared[key]
        self.pass_name, self.id_base = pass_name, id_base
        self.scripted = self.cfg.backend == "scripted"
        self.breaker = breaker

    def _outcomes(self, reqs: list[VLMRequest]) -> list[VLMOutcome]:
        if self.breaker is not None and self.breaker.tripped:
            return [VLMOutcome(None, 0, UNAVAILABLE, self.breaker.tripped) for _ in reqs]
        return call_outcomes(self.backend, reqs)

    def __call__(self, batch: pa.Table) -> pa.Table:
        rows = batch.to_pylist()
        live = [r for r in rows if _active(r, self.pass_name)]
        reqs = [VLMRequest(image_png=r["image_png"], prompt=r["prompt"], image_id=r["image_id"],
                           pass_name=self.pass_name, boxes=r["boxes"],
                           reference=(r.get("reference") or []) if self.scripted else (),
                           draft=tuple(_draft(r)), id_base=self.id_base, pairs=tuple(_asked(r))) for r in live]
        t0 = time.perf_counter()
        outs = self._outcomes(reqs) if reqs else []
        busy = time.perf_counter() - t0
        if len(outs) != len(live):
            raise RuntimeError(f"backend {self.cfg.backend!r} returned {len(outs)} answers for {len(live)} requests")
        for r in rows:
            r[TEXT_COLUMN], r[ERROR_COLUMN], r[ATTEMPTS_COLUMN] = None, None, 0
            for c in _CALL_COLUMNS:
                r[c] = None
        for r, o in zip(live, outs):
            r[TEXT_COLUMN] = o.text
            r[ERROR_COLUMN] = None if o.ok else json.dumps({"kind": o.kind, "message": o.message})
            r[ATTEMPTS_COLUMN] = o.attempts
            r[PROMPT_TOKENS_COLUMN], r[COMPLETION_TOKENS_COLUMN] = o.prompt_tokens, o.completion_tokens
            r[LATENCY_COLUMN] = o.latency_s
            r[BUSY_COLUMN] = busy / len(live)
        return rows_to_table(rows, batch.schema)


class PassesStage:
    """Every VLM pass for a batch in one actor: prompt, generate, parse, once a pass.

    The passes of one image are sequential by nature (grow and spatial read the draft), so a
    single actor pool is the cheapest arrangement for backends with a ``generate`` method; the
    vLLM path instead chains three ``ray.data.llm`` processors. Needs ``image_png, boxes``.
    """

    def __init__(self, vlm: VLMConfig | dict, id_base: int = 1, prompt_dir: str | None = None,
                 passes: Sequence[str] = VLM_PASSES, max_consecutive_failures: int | None = None,
                 pairs_per_image: int = 0, seed: int = 0) -> None:
        breaker = CallBreaker(max_consecutive_failures)  # shared: consecutive over all passes of this actor
        self.steps = [(PromptStage(p, id_base, prompt_dir, pairs_per_image, seed), GenerateStage(vlm, p, id_base, breaker),
                       ParseStage(p, id_base, breaker=breaker)) for p in passes]

    def __call__(self, batch: pa.Table) -> pa.Table:
        for prompt, generate, parse in self.steps:
            batch = parse(generate(prompt(batch)))
        return batch


class ParseStage:
    """Parse ``vlm_text`` into candidates appended to ``cands_json``; count every problem.

    A failed call (``vlm_error``) is recorded instead: ``failure_json`` names the pass, kind,
    message and attempts (over all runs), and the counters gain the call, its retries and the
    failure kind. ``max_consecutive_failures`` failures in a row trip the breaker (see CallBreaker).
    """

    def __init__(self, pass_name: str, id_base: int = 1, drop_label_mismatch: bool = False,
                 max_consecutive_failures: int | None = None, breaker: CallBreaker | None = None) -> None:
        self.pass_name, self.id_base, self.drop = pass_name, id_base, drop_label_mismatch
        self.breaker = breaker or CallBreaker(max_consecutive_failures)

    def __call__(self, batch: pa.Table) -> pa.Table:
        rows = batch.to_pylist()
        for row in rows:
            text, err, attempts = row.pop(TEXT_COLUMN, None), row.pop(ERROR_COLUMN, None), row.pop(ATTEMPTS_COLUMN, None)
            call = {c: row.pop(c, None) for c in _CALL_COLUMNS}
            row.pop("prompt", None)
            if not _active(row, self.pass_name):
                continue
            attempts = 1 if attempts is None else int(attempts)
            counters = json.loads(row.get("counters_json") or "{}")
            vlm = {"calls": {self.pass_name: 1}, "attempts": attempts, "retries": max(attempts - 1, 0),
                   "usage": call_usage(self.pass_name, call, answered=not err)}
            if err:
                e = json.loads(err)
                total = attempts + int(row.get("attempts_before") or 0)
                row["failure_json"] = json.dumps(dict(e, attempts=total, **{"pass": self.pass_name}))
                row["resume_from"] = PASS_ORDER.index(self.pass_name)
                skipped = e["kind"] == UNAVAILABLE  # never made: not a call, not a retry
                tally = {"skipped_calls": 1} if skipped else dict(vlm, failed_calls={e["kind"]: 1})
                row["counters_json"] = json.dumps(merge_counters(counters, {"vlm": tally}))
                row["run_vlm_json"] = json.dumps(merge_counters(json.loads(row.get("run_vlm_json") or "{}"), tally))
                if not skipped:
                    self.breaker.record(True, e["kind"], e.get("message", ""))
                continue
            self.breaker.record(False)
            res = parse_relations(text, id_base=self.id_base,
                                  labels=[b["category"] for b in row["boxes"]], drop_label_mismatch=self.drop)
            cands = _cands(row) + [dict(s=r.subject, o=r.object, p=r.predicate, pass_=self.pass_name, tag=r.tag)
                                   for r in res.relations]
            row["cands_json"] = json.dumps(cands)
            if self.pass_name == "pairs":  # answered: what it left unstated of these pairs does not hold
                row["asked_pairs"] = [dict(subject=a, object=b) for a, b in _asked(row)]
            row["run_vlm_json"] = json.dumps(merge_counters(json.loads(row.get("run_vlm_json") or "{}"), vlm))
            counters = merge_counters(counters, {"outputs": {self.pass_name: 1}, "vlm": vlm,
                                                 "unusable": {res.reason: 1} if res.reason else {},
                                                 "item_problems": {k: v for k, v in res.problems.items()
                                                                   if k not in OUTPUT_REASONS}})
            row["counters_json"] = json.dumps(counters)
        return rows_to_table(rows, batch.schema)


def _tally(cnt: dict, key: str, sub: str) -> None:
    d = cnt.setdefault(key, {})
    d[sub] = d.get(sub, 0) + 1


class GateStage:
    """Algorithm 1 + repair + balance + top-up + dedup on a whole batch at once (vectorised).

    Needs ``image_id, boxes, cands_json, counters_json``; replaces the candidates by the kept
    ``relations`` and the ``rejected`` list (relation as proposed + the rule that fired).
    """

    def __init__(self, gate: GateConfig | dict | None = None, topup: TopUpConfig | dict | None = None) -> None:
        self.gate = gate if isinstance(gate, GateConfig) else GateConfig.model_validate(gate or {})
        self.topup = topup if isinstance(topup, TopUpConfig) else TopUpConfig.model_validate(topup or {})

    def _candidates(self, rows: list[dict]) -> Candidates:
        img, s, o, p, ps, tag = [], [], [], [], [], []
        for i, row in enumerate(rows):
            for c in _cands(row):
                img.append(i); s.append(c["s"]); o.append(c["o"]); p.append(c["p"]); ps.append(c["pass_"]); tag.append(c.get("tag"))
        return Candidates.from_lists(img, s, o, p, ps, tag)

    def __call__(self, batch: pa.Table) -> pa.Table:
        rows = batch.to_pylist()
        good = [r for r in rows if not r.get("image_error") and not r.get("failure_json")]
        if good:
            self._gate(good)
        for row in rows:
            if row.get("image_error"):
                row["relations"], row["rejected"] = [], [image_rejection(row["image_error"])]
                rule = json.loads(row["image_error"])["rule"]
                row["counters_json"] = json.dumps(merge_counters(json.loads(row.get("counters_json") or "{}"),
                                                                 {"image_rejections": {rule: 1}}))
            elif row.get("failure_json"):  # keeps cands_json/counters_json: a rerun resumes from them
                row["relations"], row["rejected"] = [], []
            for k in ("image_png", "reference", "pairs_json") if row.get("failure_json") else (
                    "cands_json", "image_png", "reference", "pairs_json"):
                row.pop(k, None)
        return rows_to_table(rows, batch.schema)

    def _gate(self, rows: list[dict]) -> None:
        bt = BoxTable.from_images([r["image_id"] for r in rows], [r["boxes"] for r in rows])
        c = self._candidates(rows)
        res = gate_relations(bt, c, self.gate)
        acc = res.accepted
        layout = acc & (res.canonical >= 0)
        layout &= default_map().layout[np.where(res.canonical >= 0, res.canonical, 0)]
        extra = topup_candidates(bt, c.image[acc], res.subject[acc], res.object[acc], layout[acc], self.topup)
        res2 = gate_relations(bt, extra, self.gate)
        per_img = self._assemble(rows, (c, res), (extra, res2))
        for i, row in enumerate(rows):
            kept, rejected, counters = per_img[i]
            row["relations"], row["rejected"] = kept, rejected
            row["counters_json"] = json.dumps(merge_counters(json.loads(row.get("counters_json") or "{}"), counters))

    def _assemble(self, rows: list[dict], *parts: tuple[Candidates, GateResult]) -> list[tuple[list, list, dict]]:
        """Per image: kept relations, rejections, and counters (incl. scoring of injected labels)."""
        out = [([], [], {"candidates": 0, "rules": {}, "outcomes": {}, "checked": 0, "unchecked": 0,
                         "tags": {}, "rules_on_clean": {}}) for _ in rows]
        for c, r in parts:
            outcomes, rules = r.outcome_names(), r.rule_names()
            tags = c.tag if c.tag is not None else np.full(len(c), None, object)
            for j in range(len(c)):
                kept, rejected, cnt = out[int(c.image[j])]
                pass_name = PASSES[int(c.pass_[j])]
                cnt["candidates"] += 1
                rule, tag = rules[j], tags[j]
                if tag is not None:  # scoring against the scripted annotator's labels
                    res = f"rejected:{rule}" if rule is not None else (
                        "swapped" if r.repaired[j] else ("passed" if r.checked[j] else "unchecked"))
                    _tally(cnt["tags"], tag, res)
                elif rule is not None:
                    _tally(cnt, "rules_on_clean", rule)
                if rule is not None:
                    _tally(cnt, "rules", rule)
                    rejected.append(dict(subject=int(c.subject[j]), object=int(c.object[j]),
                                         predicate=str(c.predicate[j]), **{"pass": pass_name}, rule=rule))
                    continue
                _tally(cnt, "outcomes", outcomes[j])
                cnt["checked" if r.checked[j] else "unchecked"] += 1
                kept.append(dict(subject=int(r.subject[j]), object=int(r.object[j]), predicate=str(r.predicate[j]),
                                 **{"pass": pass_name}, gate=outcomes[j], score=None))
        return out
