"""Per-relation VLM judge (seed 001, § 6.5 and D.8.1, "A5b"): one relation at a time, true or false.

Each relation is drawn on its own copy of the image with the subject and object boxes outlined
in two colours (the highlighted rendering, whose corruption control was the better of the two in
D.8.1), the judge prompt asks only whether the claim holds, and the verdict is read from the
last JSON object of the answer, so a short preamble cannot break parsing. The corruption
control replaces a fixed share of predicates with another predicate of the same image; how
often the judge accepts those is reported next to the verdicts (an upper bound on its false
acceptance, since a swapped predicate is sometimes true by coincidence).

Backends: ``scripted`` (decides layout predicates of the synthetic world from the boxes; a
stand-in for tests, not a model), ``transformers`` (local VLM) and ``openai`` (any
OpenAI-compatible server; on GPU clusters the ``ray.serve.llm`` app running Qwen3-VL with vLLM).
"""

from __future__ import annotations

import zlib
from typing import Any, Literal, Sequence

import numpy as np
from pydantic import Field, model_validator

from actors.vlm.base import VLMRequest
from actors.vlm.configs import OpenAIConfig, TransformersConfig
from relate import geometry as G
from relate.config import StrictConfig

__all__ = ["JudgeConfig", "ScriptedJudgeConfig", "JudgeActor", "ScriptedJudge", "parse_verdict", "corrupt"]


class ScriptedJudgeConfig(StrictConfig):
    """Rule-based stand-in judge: geometry decides layout predicates, a seeded coin the rest."""

    seed: int = Field(0, description="seed of the coin for predicates geometry cannot decide")
    accept_undecidable: float = Field(0.5, ge=0, le=1, description="acceptance rate for pixel-only or unknown predicates")
    near_fraction: float = Field(0.25, gt=0, description="'near' holds when the gap is below this share of the larger box diagonal")


class JudgeConfig(StrictConfig):
    """Which VLM judges and how its answers are read."""

    backend: Literal["scripted", "transformers", "openai"] = Field(
        "scripted", description="scripted (synthetic stand-in), transformers (local VLM), openai (HTTP server, "
                                "e.g. the ray.serve.llm app with vLLM)")
    scripted: ScriptedJudgeConfig = Field(default_factory=ScriptedJudgeConfig, description="scripted judge settings")
    openai: OpenAIConfig | None = Field(None, description="OpenAI-compatible server settings (backend=openai)")
    transformers: TransformersConfig | None = Field(None, description="local transformers VLM (backend=transformers)")
    id_base: int = Field(1, ge=0, description="number drawn on the first box (prompts name boxes by these numbers)")

    @model_validator(mode="after")
    def _chosen_present(self) -> "JudgeConfig":
        if self.backend != "scripted" and getattr(self, self.backend) is None:
            raise ValueError(f"judge backend={self.backend!r} needs a '{self.backend}' section")
        return self


_YES = {"yes", "true", "y", "1", "correct"}
_NO = {"no", "false", "n", "0", "incorrect"}


def parse_verdict(text: Any) -> bool | None:
    """True/False from the last JSON object holding an answer; None when there is none."""
    from relate.parsing import json_objects_from_end  # one home for JSON repair

    for value in json_objects_from_end(text):
        for key in ("answer", "verdict", "holds", "true"):
            if key in value:
                v = value[key]
                if isinstance(v, bool):
                    return v
                s = str(v).strip().lower()
                if s in _YES:
                    return True
                if s in _NO:
                    return False
    return None


def corrupt(relations: Sequence[dict], share: float, seed: int) -> list[tuple[int, str]]:
    """Pick round(share * n) relations and a replacement predicate drawn from the same image.

    Returns (index, new predicate) pairs; a relation is only corrupted when the image offers a
    different predicate string, so an image with one predicate yields no corruptions.
    """
    if share <= 0 or not relations:
        return []
    rng = np.random.default_rng(seed)
    preds = sorted({r["predicate"] for r in relations})
    n = int(round(share * len(relations)))
    out = []
    for i in sorted(rng.permutation(len(relations))[:n].tolist()):
        others = [p for p in preds if p != relations[i]["predicate"]]
        if others:
            out.append((i, others[int(rng.integers(len(others)))]))
    return out


class ScriptedJudge:
    """Answers like a VLM (prose, then a JSON object) from the boxes the request carries."""

    def __init__(self, cfg: ScriptedJudgeConfig | None = None) -> None:
        self.cfg = cfg or ScriptedJudgeConfig()

    def _holds(self, s: np.ndarray, o: np.ndarray, predicate: str, image_id: str) -> bool:
        from relate.data.lexicon import CONCEPTS, SURFACE_TO_CONCEPT

        name = SURFACE_TO_CONCEPT.get(predicate.strip().lower())
        (sx, sy), (ox, oy) = G.centres(s), G.centres(o)
        rules = {"left_of": sx < ox, "right_of": sx > ox, "above": sy < oy, "below": sy > oy,
                 "inside": G.containment(s, o) >= 0.5, "contains": G.containment(o, s) >= 0.5,
                 "touching": G.touch(s, o, 1.0), "on": G.touch(s, o, 1.0) and sy < oy,
                 "near": G.gap(s, o) <= self.cfg.near_fraction * max(G.diag(s), G.diag(o))}
        if name in rules:
            return bool(rules[name])
        if name is not None and CONCEPTS[name].family == "part":
            return bool(G.containment(s, o) >= 0.5)
        # depth, appearance, action and unknown strings need pixels: a seeded coin stands in
        key = zlib.crc32(f"{self.cfg.seed}|{image_id}|{predicate}|{s.tolist()}|{o.tolist()}".encode())
        return (key % 10_000) / 10_000 < self.cfg.accept_undecidable

    def generate(self, requests: Sequence[VLMRequest]) -> list[str]:
        out = []
        for r in requests:
            ctx = r.reference[0]
            b = np.asarray(r.boxes, dtype=np.float64).reshape(-1, 4)
            ok = self._holds(b[ctx["subject"]], b[ctx["object"]], ctx["predicate"], r.image_id)
            out.append(f'Looking at the two outlined objects. {{"answer": "{"yes" if ok else "no"}"}}')
        return out


class JudgeActor:
    """Loads the judge backend once; ``judge(image, boxes, relations, ...)`` -> verdicts + control."""

    def __init__(self, cfg: JudgeConfig | dict[str, Any]) -> None:
        from actors.vlm.base import create_backend
        from actors.vlm.configs import VLMConfig
        from relate.prompts import load_prompt

        self.cfg = JudgeConfig.model_validate(cfg) if isinstance(cfg, dict) else cfg
        self.prompt = load_prompt("judge")
        if self.cfg.backend == "scripted":
            self.backend = ScriptedJudge(self.cfg.scripted)
        else:
            self.backend = create_backend(VLMConfig(backend=self.cfg.backend,
                                                    **{self.cfg.backend: getattr(self.cfg, self.cfg.backend)}))

    def _request(self, image: np.ndarray, boxes: np.ndarray, rel: dict, image_id: str) -> VLMRequest:
        from relate.markers import encode_png, render_judge_pair

        base = self.cfg.id_base
        png = encode_png(render_judge_pair(image, boxes, rel["subject"], rel["object"], id_base=base))
        text = self.prompt.render(subject_id=rel["subject"] + base, object_id=rel["object"] + base,
                                  predicate=rel["predicate"])
        return VLMRequest(image_png=png, prompt=text, image_id=image_id, pass_name="judge",
                          boxes=tuple(map(tuple, boxes.tolist())), reference=(dict(rel),), id_base=base)

    def judge(self, image: np.ndarray, boxes: Any, relations: Sequence[dict], corruption_share: float = 0.0,
              seed: int = 0, image_id: str = "request") -> dict:
        """Verdicts in input order, plus the corrupted items and their acceptance rate."""
        b = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
        rels = [{"subject": int(r["subject"]), "object": int(r["object"]), "predicate": str(r["predicate"])}
                for r in relations]
        swaps = corrupt(rels, corruption_share, seed)
        controls = [{**rels[i], "predicate": p, "original_predicate": rels[i]["predicate"]} for i, p in swaps]
        items = rels + controls
        texts = self.backend.generate([self._request(image, b, r, image_id) for r in items])
        verdicts = [parse_verdict(t) for t in texts]
        out = [{**r, "verdict": v, "raw": t} for r, v, t in zip(items, verdicts, texts)]
        judged = [c for c in out[len(rels):] if c["verdict"] is not None]
        accepted = sum(1 for c in judged if c["verdict"])
        return {"verdicts": out[: len(rels)], "controls": out[len(rels):],
                "control_acceptance": accepted / len(judged) if judged else None}

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        """Ray Data: columns image, boxes, relations -> adds ``verdicts`` (list per row)."""
        batch = dict(batch)
        batch["verdicts"] = [self.judge(np.asarray(im), bx, list(rs))["verdicts"]
                             for im, bx, rs in zip(batch["image"], batch["boxes"], batch["relations"])]
        return batch
