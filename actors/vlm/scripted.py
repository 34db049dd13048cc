"""A scripted annotator for the synthetic world: the true relations plus labelled, seeded errors.

It stands in for the VLM wherever the truth is known, so that the gate can be scored: every
injected relation carries ``"injected": <error kind>`` in its JSON item (a field real models
never write; the parser passes it through as a tag). It reproduces the annotator behaviour the
paper describes: semantic relations split between the semantic and grow passes, layout relations
in the spatial pass stated from the left/upper/front object (the bias balancing removes), and the
error kinds of Algorithm 1's gates, and, when ``hard_cases.enabled``, relations on both sides of
every threshold (``relate.data.gate_hard_cases``). Outputs are a pure function of (seed, image id, pass), so
a resumed run sees exactly the text an uninterrupted one saw.
"""

from __future__ import annotations

import json
import time
import zlib
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from actors.vlm.base import VLM_BACKENDS, VLMRequest
from actors.vlm.configs import ScriptedConfig
from relate import geometry as G
from relate.data.gate_hard_cases import hard_case_items
from relate.data.lexicon import CONCEPTS, LAYOUT_FAMILIES, SURFACE_TO_CONCEPT, inverse_form

__all__ = ["ScriptedAnnotator", "ScriptedPlan"]

# The side a biased annotator states a layout relation from (the left, upper or front object):
# a relation of the inverse concept is restated with its inverse form.
_STATED_FROM = ("left_of", "above", "in_front_of")
_PASS_CODE = {"semantic": 1, "grow": 2, "spatial": 3, "pairs": 4}


@dataclass
class ScriptedPlan:
    """What the annotator will say: JSON items (0-based ids) and whether the output is broken."""

    items: list[dict] = field(default_factory=list)
    malformed: str | None = None  # "truncated" | "prose" | None

    def tags(self) -> list[str]:
        return [i["injected"] for i in self.items if "injected" in i]


def _family(predicate: str) -> str | None:
    c = SURFACE_TO_CONCEPT.get(predicate.strip().lower())
    return None if c is None else CONCEPTS[c].family


class _Geo:
    """Pairwise geometry of one image's boxes, computed once per request."""

    def __init__(self, boxes: Sequence[dict]) -> None:
        b = np.array([[x["x1"], x["y1"], x["x2"], x["y2"]] for x in boxes], float).reshape(-1, 4)
        self.n = len(b)
        self.part = np.array([bool(x.get("is_body_part")) for x in boxes], bool)
        self.person = np.array([bool(x.get("is_person")) for x in boxes], bool)
        self.inter = G.intersection_area(b[:, None], b[None])
        self.area = G.area(b)
        self.gap = G.gap(b[:, None], b[None])
        d = G.diag(b)
        self.maxdiag = np.maximum(d[:, None], d[None])
        self.iou = G.iou(b[:, None], b[None])

    def pairs(self, mask: np.ndarray) -> np.ndarray:
        m = mask & ~np.eye(self.n, dtype=bool)
        return np.argwhere(m)


class ScriptedAnnotator:
    """``generate`` renders :meth:`plan` as text; tests and scoring call :meth:`plan` directly."""

    def __init__(self, cfg: ScriptedConfig | None = None) -> None:
        self.cfg = cfg or ScriptedConfig()

    def _rng(self, req: VLMRequest, salt: int = 0) -> np.random.Generator:
        return np.random.default_rng([self.cfg.seed, zlib.crc32(req.image_id.encode()), _PASS_CODE.get(req.pass_name, 0), salt])

    # -- the truth, as this annotator states it -------------------------------------------
    def _truth(self, req: VLMRequest) -> list[dict]:
        split = np.random.default_rng([self.cfg.seed, zlib.crc32(req.image_id.encode()), 99])
        rng = self._rng(req, 1)
        out = []
        for r in req.reference:
            s, o, p = int(r["subject"]), int(r["object"]), str(r["predicate"])
            fam = _family(p)
            layout = fam in LAYOUT_FAMILIES
            grow = split.random() < self.cfg.grow_share
            want = "spatial" if layout else ("grow" if grow else "semantic")
            if want != req.pass_name:
                continue
            concept = SURFACE_TO_CONCEPT.get(p.strip().lower())
            biased = concept is not None and CONCEPTS[concept].inverse in _STATED_FROM
            if biased and rng.random() < self.cfg.direction_bias:
                s, o, p = o, s, inverse_form(p)
            out.append({"subject": s, "object": o, "predicate": p})
        return out

    def _pairs_truth(self, req: VLMRequest) -> list[dict]:
        """The pairs pass: what holds of each asked pair, every fact once (from the end the world's
        truth lists first), each kept with probability ``pairs_recall``, in one of its concept's forms."""
        if not req.pairs:
            return []
        if self.cfg.world is None:
            raise ValueError("the scripted annotator's pairs pass needs vlm.scripted.world: the synthetic world "
                             "folder the images come from")
        from relate.data.world_truth import world_truth

        ((truth, _),) = world_truth(self.cfg.world, [req.image_id], [req.boxes])
        asked = {(min(a, b), max(a, b)) for a, b in req.pairs}
        rng = self._rng(req, 1)
        out, said = [], set()
        for s, o, c in sorted(truth):
            if (min(s, o), max(s, o)) not in asked:
                continue
            concept = CONCEPTS[c]
            back = concept.inverse if concept.inverse is not None else (c if concept.symmetric else None)
            if (o, s, back) in said:
                continue
            said.add((s, o, c))
            if rng.random() >= self.cfg.pairs_recall:
                continue
            forms = concept.forms
            out.append({"subject": int(s), "object": int(o), "predicate": forms[int(rng.integers(len(forms)))]})
        return out

    # -- injected errors ------------------------------------------------------------------
    def _pick(self, rng: np.random.Generator, pairs: np.ndarray) -> tuple[int, int] | None:
        if len(pairs) == 0:
            return None
        s, o = pairs[int(rng.integers(len(pairs)))]
        return int(s), int(o)

    def _spatial_errors(self, rng, g: _Geo, items: list[dict]) -> list[dict]:
        e, whole = self.cfg.errors, ~g.part
        ww = whole[:, None] & whole[None]
        inject = [
            ("contact_disjoint", e.contact_disjoint, ww & (g.gap > 0), ("touching", "on", "resting on", "leaning against")),
            ("containment_no_overlap", e.containment_no_overlap, ww & (g.inter <= 0), ("inside", "within")),
            ("proximity_far", e.proximity_far, ww & (g.gap > 0.6 * g.maxdiag), ("near", "next to", "close to")),
            ("not_layout", e.not_layout, ww, ("holding", "brighter than", "looking at")),
            ("body_part_spatial", e.body_part_spatial, g.part[:, None] | g.part[None], ("near", "above", "touching")),
        ]
        out = []
        for kind, rate, mask, preds in inject:
            if rng.random() < rate and (pair := self._pick(rng, g.pairs(mask))) is not None:
                out.append({"subject": pair[0], "object": pair[1], "predicate": str(rng.choice(preds)), "injected": kind})
        for kind, rate, fams in (("wrong_direction", e.wrong_direction, ("spatial",)), ("depth_flip", e.depth_flip, ("depth",))):
            cands = [i for i, it in enumerate(items) if _family(it["predicate"]) in fams and "injected" not in it]
            if cands and rng.random() < rate:
                it = items[cands[int(rng.integers(len(cands)))]]
                it.update(subject=it["object"], object=it["subject"], injected=kind)
        return out

    def _semantic_errors(self, rng, g: _Geo) -> list[dict]:
        e, whole = self.cfg.errors, ~g.part
        cover = g.inter / np.maximum(g.area[None, :], 1e-9)  # share of the object inside the subject
        inject = [
            ("body_part_subject", e.body_part_subject, g.part[:, None] & whole[None], ("holding", "looking at", "touching")),
            ("body_part_object", e.body_part_object, whole[:, None] & g.part[None] & (cover >= 0.7), ("wearing", "carrying")),
            ("semantic_disjoint", e.semantic_disjoint, whole[:, None] & whole[None] & (g.gap > 0), ("holding", "wearing", "carrying")),
        ]
        out = []
        for kind, rate, mask, preds in inject:
            if rng.random() < rate and (pair := self._pick(rng, g.pairs(mask))) is not None:
                out.append({"subject": pair[0], "object": pair[1], "predicate": str(rng.choice(preds)), "injected": kind})
        return out

    def _common_errors(self, rng, g: _Geo, req: VLMRequest, items: list[dict]) -> list[dict]:
        e, out = self.cfg.errors, []
        dup = g.pairs(g.person[:, None] & g.person[None] & (g.iou >= 0.75))
        if len(dup) and req.pass_name == "semantic" and rng.random() < e.person_duplicate:
            s, o = dup[int(rng.integers(len(dup)))]
            out.append({"subject": int(s), "object": int(o), "predicate": "standing beside", "injected": "person_duplicate"})
        if g.n and rng.random() < e.bad_index:
            s = int(rng.integers(g.n))
            out.append({"subject": s, "object": g.n + int(rng.integers(0, 3)), "predicate": "looking at", "injected": "bad_index"})
        return out

    def _repeats(self, rng, req: VLMRequest, items: list[dict]) -> list[dict]:
        """A relation proposed again (grow: from the draft, spatial: from this answer); goes last."""
        if req.pass_name == "grow":
            truth = {(int(r["subject"]), str(r["predicate"]), int(r["object"])) for r in req.reference}
            pool = [{"subject": s, "object": o, "predicate": p} for s, p, o in req.draft if (s, p, o) in truth]
        else:
            pool = [it for it in items if "injected" not in it] if req.pass_name == "spatial" else []
        if pool and rng.random() < self.cfg.errors.repeated_pair:
            it = pool[int(rng.integers(len(pool)))]
            return [{"subject": it["subject"], "object": it["object"], "predicate": it["predicate"], "injected": "repeated_pair"}]
        return []

    def plan(self, req: VLMRequest) -> ScriptedPlan:
        """The items (0-based ids) this annotator emits for ``req``, errors labelled."""
        rng = self._rng(req, 2)
        g = _Geo(req.boxes)
        if req.pass_name == "pairs":  # errors of both kinds, on the relations it states
            items = self._pairs_truth(req)
            items += self._spatial_errors(rng, g, items) + self._semantic_errors(rng, g)
        else:
            items = self._truth(req)
            items += self._spatial_errors(rng, g, items) if req.pass_name == "spatial" else self._semantic_errors(rng, g)
        items += self._common_errors(rng, g, req, items)
        order = rng.permutation(len(items))
        items = [items[int(i)] for i in order] + self._repeats(rng, req, items)
        items += hard_case_items(req.boxes, req.pass_name, self.cfg.hard_cases)  # no draw: off changes nothing
        malformed = None
        if rng.random() < self.cfg.errors.malformed_json:
            malformed = "truncated" if rng.random() < 0.6 else "prose"
        return ScriptedPlan(items, malformed)

    # -- rendering ------------------------------------------------------------------------
    def render(self, req: VLMRequest, plan: ScriptedPlan) -> str:
        rng = self._rng(req, 3)
        cats = [b.get("category") or "object" for b in req.boxes]
        noisy = rng.random() < self.cfg.format_noise
        rels = []
        for it in plan.items:
            s, o = it["subject"] + req.id_base, it["object"] + req.id_base
            d = {"subject_id": f"#{s}" if noisy else s,
                 "subject_label": cats[it["subject"]] if 0 <= it["subject"] < len(cats) else "object",
                 "predicate": it["predicate"], "object_id": str(o) if noisy else o,
                 "object_label": cats[it["object"]] if 0 <= it["object"] < len(cats) else "object"}
            if "injected" in it:
                d["injected"] = it["injected"]
            rels.append(d)
        body = json.dumps({"relations": rels}, indent=1 if noisy else None)
        if plan.malformed == "truncated":
            return "```json\n" + body[: max(1, len(body) // 2)]
        if plan.malformed == "prose":
            return "The image is too ambiguous for me to list relations with confidence."
        if noisy:
            body = body.replace("\n ]", ",\n ]")  # a trailing comma a strict parser would choke on
            return f"Here are the relations I found.\n```json\n{body}\n```\nLet me know if you need more."
        return body

    def generate(self, requests: Sequence[VLMRequest]) -> list[str]:
        out = []
        for req in requests:
            if self.cfg.delay_s:
                time.sleep(self.cfg.delay_s)
            out.append(self.render(req, self.plan(req)))
        return out


VLM_BACKENDS.register("scripted")(ScriptedAnnotator)
