"""Whole-graph comparison arm and its controls (seed 001, § 6.5 and D.8, Tab. 25).

Two graphs of one image are shown side by side in both presentation orders, with several sampled
votes per order; all votes are pooled and a winner needs a supermajority. Three controls certify
the judge rather than any single comparison: *scramble* (a graph against a copy whose predicates
are permuted across its pairs: a judge that cannot prefer the intact one measures nothing),
*padding* (a graph against itself plus fabricated relations: the judge's taste for longer text)
and *primacy* (the share of decisive votes cast for whichever graph came first; 0.5 is
unbiased). A run is certified only when scramble accuracy >= 0.75, primacy <= 0.60 and at least
ten control comparisons were decisive; an uncertified run is reported as such and never scored.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from itertools import combinations
from typing import Any, Literal, Mapping, Sequence

import numpy as np
from pydantic import Field

from relate.config import StrictConfig
from relate.judge.calls import JudgeCall, stable_seed

__all__ = ["GraphArmConfig", "scramble", "pad", "graph_text", "build_graph_calls", "parse_graph_verdict",
           "tally_graph_arm"]

SCRAMBLED, PADDED = "~scrambled", "~padded"


class GraphArmConfig(StrictConfig):
    """Whole-graph comparisons, their controls and the certification rule."""

    enabled: bool = Field(True, description="run the whole-graph arm")
    depth: Literal["relative", "matched", "deployed"] = Field(
        "relative", description="graph each system contributes: relative (pairs within relative_fraction of the "
                                "image's best pair, D.8), matched (top-k pairs) or deployed (own threshold)")
    relative_fraction: float = Field(0.7, gt=0, le=1, description="relative depth: share of the best pair's score a pair needs")
    max_relations: int = Field(20, ge=1, description="relative depth: at most this many relations per graph")
    votes: int = Field(3, ge=1, description="sampled votes per presentation order (Tab. 25: 6 per comparison)")
    supermajority: float = Field(0.67, gt=0.5, le=1, description="share of pooled votes a winner needs")
    padding_relations: int = Field(3, ge=1, description="fabricated relations added in the padding control")
    min_scramble_accuracy: float = Field(0.75, ge=0, le=1, description="certification: scramble accuracy at least this")
    max_primacy: float = Field(0.60, ge=0.5, le=1, description="certification: primacy rate at most this")
    min_decisive_controls: int = Field(10, ge=1, description="certification: decisive control comparisons at least this")
    seed: int = Field(0, description="seed of scrambling and padding")


def scramble(graph: Sequence[Mapping[str, Any]], rng: np.random.Generator) -> list[dict] | None:
    """Predicates permuted across the graph's pairs; None when no permutation changes anything."""
    preds = [r["predicate"] for r in graph]
    if len(set(preds)) < 2:
        return None
    for _ in range(20):
        perm = [preds[i] for i in rng.permutation(len(preds))]
        if perm != preds:
            return [{**r, "predicate": p} for r, p in zip(graph, perm)]
    return [{**r, "predicate": p} for r, p in zip(graph, preds[1:] + preds[:1])]


def pad(graph: Sequence[Mapping[str, Any]], n_boxes: int, pool: Sequence[str], n: int,
        rng: np.random.Generator) -> list[dict] | None:
    """The graph plus ``n`` fabricated relations on unused pairs; None when it cannot be padded."""
    used = {(r["subject"], r["object"]) for r in graph}
    free = [(s, o) for s in range(n_boxes) for o in range(n_boxes) if s != o and (s, o) not in used]
    if not free or not pool or not graph:
        return None
    pick = rng.permutation(len(free))[:n]
    extra = [{"subject": free[i][0], "object": free[i][1], "predicate": pool[int(rng.integers(len(pool)))],
              "score": None} for i in pick]
    return [dict(r) for r in graph] + extra


def graph_text(graph: Sequence[Mapping[str, Any]], categories: Sequence[str | None], id_base: int = 1) -> str:
    from relate.prompts import draft_list

    if not graph:
        return "(no relations)"
    return draft_list([(int(r["subject"]), str(r["predicate"]), int(r["object"])) for r in graph], categories, id_base)


def _comparison(image_id: str, kind: str, system: str, a: tuple[str, list], b: tuple[str, list], votes: int,
                image: np.ndarray, categories: Sequence[str | None], truth: Any, id_base: int) -> list[JudgeCall]:
    from relate.prompts import load_prompt

    template = load_prompt("judge_graphs")
    calls = []
    for (first, g1), (second, g2) in ((a, b), (b, a)):
        prompt = template.render(first=graph_text(g1, categories, id_base), second=graph_text(g2, categories, id_base))
        for v in range(votes):
            cid = f"{image_id}/graph/{kind}/{system}/{first}>{second}/{v}"
            record = {"call_id": cid, "image_id": image_id, "arm": "graph", "system": system, "kind": kind,
                      "first": first, "second": second, "first_size": len(g1), "second_size": len(g2), "vote": v}
            context = {"task": "graphs", "call_id": cid, "first": g1, "second": g2, "truth": truth}
            calls.append(JudgeCall(record, prompt, image, context))
    return calls


def build_graph_calls(image_id: str, image: np.ndarray, boxes: np.ndarray, categories: Sequence[str | None],
                      graphs: Mapping[str, list[dict]], cfg: GraphArmConfig,
                      truth: Sequence[Mapping[str, Any]] | None = None, id_base: int = 1) -> list[JudgeCall]:
    """Every graph-arm call for one image: system pairs, then a scramble and a padding control each."""
    from relate.markers import render_judge_all

    shown = render_judge_all(image, boxes, id_base=id_base)
    truth_ctx = [dict(t) for t in truth] if truth is not None else None
    rng = np.random.default_rng(stable_seed(cfg.seed, image_id, "graph"))
    pool = sorted({r["predicate"] for g in graphs.values() for r in g})
    calls: list[JudgeCall] = []
    for a, b in combinations(sorted(graphs), 2):
        calls += _comparison(image_id, "compare", f"{a}|{b}", (a, graphs[a]), (b, graphs[b]), cfg.votes,
                             shown, categories, truth_ctx, id_base)
    for name in sorted(graphs):
        g = graphs[name]
        sc = scramble(g, rng)
        if sc is not None:
            calls += _comparison(image_id, "scramble", name, (name, g), (name + SCRAMBLED, sc), cfg.votes,
                                 shown, categories, truth_ctx, id_base)
        pd_ = pad(g, len(boxes), pool, cfg.padding_relations, rng)
        if pd_ is not None:
            calls += _comparison(image_id, "padding", name, (name, g), (name + PADDED, pd_), cfg.votes,
                                 shown, categories, truth_ctx, id_base)
    return calls


_FIRST = {"1", "first", "description 1", "one"}
_SECOND = {"2", "second", "description 2", "two"}
_TIE = {"tie", "equal", "0", "neither", "both", "same"}


def parse_graph_verdict(text: Any) -> str | None:
    """'first' | 'second' | 'tie' from the last JSON object naming the better description."""
    from relate.parsing import json_objects_from_end  # one home for JSON repair

    for value in json_objects_from_end(text):
        for key in ("better", "winner", "answer", "choice"):
            if key in value:
                s = str(value[key]).strip().lower()
                if s in _FIRST:
                    return "first"
                if s in _SECOND:
                    return "second"
                if s in _TIE:
                    return "tie"
    return None


def _winner(votes: Counter, cast: int, supermajority: float) -> str | None:
    if cast == 0:
        return None
    label, n = max(((k, v) for k, v in votes.items() if k != "tie"), key=lambda kv: kv[1], default=(None, 0))
    return label if n / cast >= supermajority else None


def _rate(k: int, n: int) -> float | None:
    return k / n if n else None


def tally_graph_arm(rows: Sequence[Mapping[str, Any]], cfg: GraphArmConfig) -> dict:
    """Controls, certification and (only when certified) the pairwise verdicts from audit rows."""
    groups: dict[tuple, list] = defaultdict(list)
    first_votes = second_votes = unparseable = 0
    for r in rows:
        if r["arm"] != "graph":
            continue
        groups[(r["image_id"], r["kind"], r["system"])].append(r)
        v = r["verdict"]
        first_votes += v == "first"
        second_votes += v == "second"
        unparseable += v is None
    outcome: dict[str, list] = defaultdict(list)
    for (image_id, kind, system), rs in sorted(groups.items()):
        votes: Counter = Counter()
        for r in rs:
            if r["verdict"] in ("first", "second"):
                votes[r[r["verdict"]]] += 1
            elif r["verdict"] == "tie":
                votes["tie"] += 1
        cast = sum(votes.values())
        win = _winner(votes, cast, cfg.supermajority)
        sizes = {r["first"]: r["first_size"] for r in rs} | {r["second"]: r["second_size"] for r in rs}
        outcome[kind].append({"image_id": image_id, "system": system, "winner": win, "sizes": sizes})
    return _summarise(outcome, first_votes, second_votes, unparseable, cfg)


def _control(items: list[dict], suffix: str) -> dict:
    decisive = [o for o in items if o["winner"] is not None]
    good = sum(1 for o in decisive if not o["winner"].endswith(suffix))
    return {"compared": len(items), "decisive": len(decisive), "correct": good, "rate": _rate(good, len(decisive))}


def _summarise(outcome: Mapping[str, list], first: int, second: int, unparseable: int, cfg: GraphArmConfig) -> dict:
    scr, padc = _control(outcome.get("scramble", []), SCRAMBLED), _control(outcome.get("padding", []), PADDED)
    primacy = _rate(first, first + second)
    decisive_controls = scr["decisive"] + padc["decisive"]
    reasons = []
    if scr["rate"] is None or scr["rate"] < cfg.min_scramble_accuracy:
        reasons.append(f"scramble accuracy {scr['rate']} < {cfg.min_scramble_accuracy}")
    if primacy is None or primacy > cfg.max_primacy:
        reasons.append(f"primacy {primacy} > {cfg.max_primacy}")
    if decisive_controls < cfg.min_decisive_controls:
        reasons.append(f"{decisive_controls} decisive control comparisons < {cfg.min_decisive_controls}")
    out = {"controls": {"scramble": scr, "padding": padc, "primacy": primacy, "decisive_controls": decisive_controls,
                        "decisive_votes": first + second, "unparseable_votes": unparseable},
           "certified": not reasons, "status": "certified" if not reasons else "uncertified", "reasons": reasons,
           "verdicts": None}
    if not reasons:
        out["verdicts"] = _pairwise(outcome.get("compare", []))
    return out


def _pairwise(items: list[dict]) -> dict:
    by_pair: dict[str, list] = defaultdict(list)
    for o in items:
        by_pair[o["system"]].append(o)
    res = {}
    for pair, os_ in sorted(by_pair.items()):
        a, b = pair.split("|", 1)
        decisive = [o for o in os_ if o["winner"] is not None]
        wins_a = sum(1 for o in decisive if o["winner"] == a)
        strata: dict[str, list] = {"a_longer": [], "equal": [], "b_longer": []}
        for o in decisive:
            la, lb = o["sizes"].get(a, 0), o["sizes"].get(b, 0)
            strata["a_longer" if la > lb else "b_longer" if lb > la else "equal"].append(o["winner"] == a)
        res[pair] = {"compared": len(os_), "decisive": len(decisive), "wins": {a: wins_a, b: len(decisive) - wins_a},
                     "win_rate_first": _rate(wins_a, len(decisive)),
                     "by_length": {k: {"n": len(v), "win_rate_first": _rate(sum(v), len(v))} for k, v in strata.items()}}
    return res
