"""Ray Data stages of the annotation pipeline (seed 001, §4.1, App. C), as plain callable classes.

Each stage takes and returns a ``pyarrow.Table`` batch, declares the columns it needs, and works
on a table built from a list of dicts in a unit test. Between stages the per-image candidate
relations travel as a JSON string column (``cands_json``), so blocks never disagree on nested
types when a batch happens to have no relations at all.
"""

from __future__ import annotations

import json
from typing import Sequence

import numpy as np
import pyarrow as pa

from actors.vlm.base import VLMRequest, create_backend
from actors.vlm.configs import VLMConfig
from actors.vlm.vllm_data import TEXT_COLUMN
from relate.gate import (BoxTable, Candidates, GateConfig, GateResult, TopUpConfig, gate_relations,
                         topup_candidates)
from relate.gate_canonical import default_map
from relate.markers import draw_markers, encode_png
from relate.parsing import OUTPUT_REASONS, parse_relations
from relate.prompts import draft_list, load_prompt, object_list
from relate.schema import BOX_TYPE, PASSES, REJECTION_TYPE, RELATION_TYPE

__all__ = ["MarkStage", "PromptStage", "GenerateStage", "ParseStage", "PassesStage", "GateStage", "rows_to_table",
           "merge_counters", "VLM_PASSES"]

VLM_PASSES = ("semantic", "grow", "spatial")
_EXTRA_TYPES = {"image_png": pa.binary(), "prompt": pa.string(), TEXT_COLUMN: pa.string(),
                "cands_json": pa.string(), "counters_json": pa.string(), "shard": pa.string(),
                "relations": pa.list_(RELATION_TYPE), "rejected": pa.list_(REJECTION_TYPE),
                "reference": pa.list_(RELATION_TYPE), "boxes": pa.list_(BOX_TYPE)}


def rows_to_table(rows: list[dict], like: pa.Schema) -> pa.Table:
    """Rows -> table, typing known columns explicitly (empty lists stay well-typed)."""
    names = list(rows[0].keys()) if rows else [f.name for f in like]
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
        from PIL import Image

        rows = batch.to_pylist()
        for row in rows:
            if self.dup_rate > 0:
                self._noise(row)
            with Image.open(row["uri"]) as im:
                pixels = np.asarray(im.convert("RGB"))
            row["image_png"] = encode_png(draw_markers(pixels, row["boxes"], id_base=self.id_base, outlines=self.outlines))
            row.setdefault("cands_json", "[]")
            row.setdefault("counters_json", "{}")
        return rows_to_table(rows, batch.schema)


def _cands(row: dict) -> list[dict]:
    return json.loads(row.get("cands_json") or "[]")


def _draft(row: dict) -> list[tuple[int, str, int]]:
    n = len(row["boxes"])
    return [(c["s"], c["p"], c["o"]) for c in _cands(row) if 0 <= c["s"] < n and 0 <= c["o"] < n]


class PromptStage:
    """Render the pass's prompt for each image (needs ``boxes, cands_json``; adds ``prompt``)."""

    def __init__(self, pass_name: str, id_base: int = 1, prompt_dir: str | None = None) -> None:
        if pass_name not in VLM_PASSES:
            raise ValueError(f"unknown pass {pass_name!r}; valid: {list(VLM_PASSES)}")
        self.pass_name, self.id_base = pass_name, id_base
        self.template = load_prompt(pass_name, prompt_dir)

    def __call__(self, batch: pa.Table) -> pa.Table:
        rows = batch.to_pylist()
        for row in rows:
            cats = [b["category"] for b in row["boxes"]]
            values = dict(n=len(cats), object_list=object_list(cats, self.id_base))
            if "draft" in self.template.fields:
                values["draft"] = draft_list(_draft(row), cats, self.id_base)
            row["prompt"] = self.template.render(**values)
        return rows_to_table(rows, batch.schema)


class GenerateStage:
    """Call the configured backend once per batch (needs ``image_png, prompt``; adds ``vlm_text``).

    Heavy state (a model, an HTTP pool) is created once in ``__init__``; Ray Data runs this class
    in an actor pool with the concurrency and CPUs/GPUs the config gives.
    """

    _shared: dict = {}

    def __init__(self, vlm: VLMConfig | dict, pass_name: str, id_base: int = 1) -> None:
        self.cfg = vlm if isinstance(vlm, VLMConfig) else VLMConfig.model_validate(vlm)
        key = self.cfg.model_dump_json()
        if key not in GenerateStage._shared:  # one model per process, shared by the three passes
            GenerateStage._shared[key] = create_backend(self.cfg)
        self.backend = GenerateStage._shared[key]
        self.pass_name, self.id_base = pass_name, id_base
        self.scripted = self.cfg.backend == "scripted"

    def __call__(self, batch: pa.Table) -> pa.Table:
        rows = batch.to_pylist()
        reqs = [VLMRequest(image_png=r["image_png"], prompt=r["prompt"], image_id=r["image_id"],
                           pass_name=self.pass_name, boxes=r["boxes"],
                           reference=(r.get("reference") or []) if self.scripted else (),
                           draft=tuple(_draft(r)), id_base=self.id_base) for r in rows]
        texts = self.backend.generate(reqs)
        if len(texts) != len(rows):
            raise RuntimeError(f"backend {self.cfg.backend!r} returned {len(texts)} answers for {len(rows)} requests")
        for r, t in zip(rows, texts):
            r[TEXT_COLUMN] = t
        return rows_to_table(rows, batch.schema)


class PassesStage:
    """All three VLM passes for a batch in one actor: prompt, generate, parse, three times.

    The passes of one image are sequential by nature (grow and spatial read the draft), so a
    single actor pool is the cheapest arrangement for backends with a ``generate`` method; the
    vLLM path instead chains three ``ray.data.llm`` processors. Needs ``image_png, boxes``.
    """

    def __init__(self, vlm: VLMConfig | dict, id_base: int = 1, prompt_dir: str | None = None,
                 passes: Sequence[str] = VLM_PASSES) -> None:
        self.steps = [(PromptStage(p, id_base, prompt_dir), GenerateStage(vlm, p, id_base), ParseStage(p, id_base))
                      for p in passes]

    def __call__(self, batch: pa.Table) -> pa.Table:
        for prompt, generate, parse in self.steps:
            batch = parse(generate(prompt(batch)))
        return batch


class ParseStage:
    """Parse ``vlm_text`` into candidates appended to ``cands_json``; count every problem."""

    def __init__(self, pass_name: str, id_base: int = 1, drop_label_mismatch: bool = False) -> None:
        self.pass_name, self.id_base, self.drop = pass_name, id_base, drop_label_mismatch

    def __call__(self, batch: pa.Table) -> pa.Table:
        rows = batch.to_pylist()
        for row in rows:
            res = parse_relations(row.get(TEXT_COLUMN), id_base=self.id_base,
                                  labels=[b["category"] for b in row["boxes"]], drop_label_mismatch=self.drop)
            cands = _cands(row) + [dict(s=r.subject, o=r.object, p=r.predicate, pass_=self.pass_name, tag=r.tag)
                                   for r in res.relations]
            row["cands_json"] = json.dumps(cands)
            counters = json.loads(row.get("counters_json") or "{}")
            counters = merge_counters(counters, {"outputs": {self.pass_name: 1},
                                                 "unusable": {res.reason: 1} if res.reason else {},
                                                 "item_problems": {k: v for k, v in res.problems.items()
                                                                   if k not in OUTPUT_REASONS}})
            row["counters_json"] = json.dumps(counters)
            row.pop(TEXT_COLUMN, None)
            row.pop("prompt", None)
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
            for k in ("cands_json", "image_png", "reference"):
                row.pop(k, None)
        return rows_to_table(rows, batch.schema)

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
