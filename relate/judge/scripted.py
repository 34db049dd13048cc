"""A scripted judge with known error rates, to check that the protocol measures what it claims.

It accepts a relation that is true of the image (against the synthetic world's ground truth) with
probability ``accept_true`` (a) and a false one with probability ``accept_false`` (b), so the
protocol must recover a from the asserted relations and b from the corruption control. For whole
graphs it prefers the description with the higher share of true relations, but with probability
``first_bias`` it answers "the first one" whatever it was shown: the failure mode the primacy
control exists to catch. Coins are a pure function of (seed, call id), so a resumed run sees the
same answers. It answers in text like a model (a sentence, then a JSON object) through the same
``generate(requests)`` interface as every VLM backend, reading only ``request.reference[0]``.
"""

from __future__ import annotations

from typing import Any, Sequence

from pydantic import Field

from relate.config import StrictConfig
from relate.judge.calls import TruthIndex, stable_seed

__all__ = ["ScriptedJudgeConfig", "ScriptedJudge"]


class ScriptedJudgeConfig(StrictConfig):
    """Error rates of the scripted judge."""

    accept_true: float = Field(0.85, ge=0, le=1, description="a: probability of accepting a true relation")
    accept_false: float = Field(0.15, ge=0, le=1, description="b: probability of accepting a false relation (e.g. a corruption)")
    first_bias: float = Field(0.0, ge=0, le=1, description="graph arm: probability of choosing the first description regardless")
    graph_noise: float = Field(0.0, ge=0, le=1, description="graph arm: probability of a uniformly random answer (1, 2 or tie)")
    unparseable: float = Field(0.0, ge=0, le=1, description="probability of an answer with no JSON (counted, never guessed)")
    seed: int = Field(0, description="seed of every coin")


def _precision(graph: Sequence[dict], is_true: TruthIndex) -> float:
    if not graph:
        return 0.0
    return sum(is_true(r["subject"], r["object"], r["predicate"]) for r in graph) / len(graph)


class ScriptedJudge:
    """``generate(requests) -> list[str]``; each request carries its context in ``reference[0]``."""

    def __init__(self, cfg: ScriptedJudgeConfig | dict[str, Any] | None = None) -> None:
        self.cfg = ScriptedJudgeConfig.model_validate(cfg or {})

    def _coin(self, call_id: str, what: str) -> float:
        return stable_seed(self.cfg.seed, call_id, what) / 2**32

    def _relation(self, ctx: dict) -> str:
        c = ctx["claim"]
        ok = TruthIndex(ctx["truth"])(c["subject"], c["object"], c["predicate"])
        accept = self._coin(ctx["call_id"], "accept") < (self.cfg.accept_true if ok else self.cfg.accept_false)
        return f'The outlined pair looks {"consistent" if accept else "inconsistent"} with the claim. ' \
               f'{{"answer": "{"yes" if accept else "no"}"}}'

    def _graphs(self, ctx: dict) -> str:
        cid = ctx["call_id"]
        if self._coin(cid, "bias") < self.cfg.first_bias:
            choice: Any = 1
        elif self._coin(cid, "noise") < self.cfg.graph_noise:
            choice = (1, 2, "tie")[int(self._coin(cid, "pick") * 3)]
        else:
            is_true = TruthIndex(ctx["truth"])
            p1, p2 = _precision(ctx["first"], is_true), _precision(ctx["second"], is_true)
            choice = 1 if p1 > p2 else 2 if p2 > p1 else "tie"
        return f'Comparing both lists against the picture. {{"better": {choice if choice != "tie" else chr(34) + "tie" + chr(34)}}}'

    def _answer(self, request: Any) -> str:
        if not request.reference or not isinstance(request.reference[0], dict):
            raise ValueError(f"scripted judge: request for {request.image_id!r} carries no context in reference[0]")
        ctx = request.reference[0]
        if ctx.get("truth") is None:
            raise ValueError(f"scripted judge needs the ground truth of image {request.image_id!r}")
        if self._coin(ctx["call_id"], "garble") < self.cfg.unparseable:
            return "I am not able to decide from this picture."
        if ctx["task"] == "relation":
            return self._relation(ctx)
        if ctx["task"] == "graphs":
            return self._graphs(ctx)
        raise ValueError(f"scripted judge: unknown task {ctx['task']!r}; valid: ['relation', 'graphs']")

    def generate(self, requests: Sequence[Any]) -> list[str]:
        return [self._answer(r) for r in requests]
