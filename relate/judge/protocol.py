"""Per-relation judge protocol, A5b (seed 001, § 6.5 and D.8.1).

Each system's relations are judged one at a time, at two depths that answer different questions:
*matched* (the top-k pairs of every system, no threshold, so length is not a variable and
accepted = precision x depth) and *deployed* (what each system asserts above its own threshold).
A fixed share of relations is additionally shown with its predicate swapped for another predicate
asserted on the same image; how often the judge accepts those corruptions is reported per run and
depth. It is an upper bound on false acceptance, since a swapped predicate can be true by chance;
when ground truth is known, the rate on corruptions that are really false is reported too.
"""

from __future__ import annotations

from typing import Any, Literal, Mapping, Sequence

import numpy as np
from pydantic import Field

from relate.config import StrictConfig
from relate.judge.calls import JudgeCall, TruthIndex, stable_seed

__all__ = ["RelationArmConfig", "DEPTHS", "best_per_pair", "select_matched", "select_deployed", "select_relative",
           "corruptions", "build_relation_calls", "render_relation"]

DEPTHS = ("matched", "deployed")


class RelationArmConfig(StrictConfig):
    """The per-relation arm: depths, corruption control, rendering."""

    depths: list[Literal["matched", "deployed"]] = Field(default_factory=lambda: ["matched", "deployed"],
                                                         description="which depths to judge (D.8.1 runs both)")
    matched_k: int = Field(10, ge=1, description="matched depth: top-k pairs of every system, no threshold (Tab. 7: 10)")
    deployed_max: int = Field(20, ge=1, description="deployed depth: at most this many relations per image and system")
    corruption_share: float = Field(0.2, ge=0, le=1, description="share of judged relations also shown with a swapped predicate")
    rendering: Literal["highlighted", "plain"] = Field(
        "highlighted", description="highlighted: one image per relation, subject and object in two colours; "
                                   "plain: every box outlined and numbered (D.8.1 compares both)")
    seed: int = Field(0, description="seed of the corruption draw (a function of seed, image and depth)")


def best_per_pair(triplets: Sequence[Mapping[str, Any]]) -> list[dict]:
    """One relation per ordered pair (its best-scoring predicate), best first; self-pairs dropped."""
    best: dict[tuple[int, int], dict] = {}
    for t in triplets:
        s, o = int(t["subject"]), int(t["object"])
        if s == o:
            continue
        sc = float(t["score"]) if t.get("score") is not None else 0.0
        cur = best.get((s, o))
        if cur is None or sc > cur["score"] or (sc == cur["score"] and str(t["predicate"]) < cur["predicate"]):
            best[(s, o)] = {"subject": s, "object": o, "predicate": str(t["predicate"]), "score": sc}
    # ties broken by pair index so every run selects the same relations
    return sorted(best.values(), key=lambda r: (-r["score"], r["subject"], r["object"]))


def select_matched(triplets: Sequence[Mapping[str, Any]], k: int) -> list[dict]:
    """Matched depth: the top-k pairs, whatever their scores."""
    return best_per_pair(triplets)[:k]


def select_deployed(triplets: Sequence[Mapping[str, Any]], threshold: float, max_relations: int) -> list[dict]:
    """Deployed depth: pairs whose best score reaches the system's own threshold (capped)."""
    return [r for r in best_per_pair(triplets) if r["score"] >= threshold][:max_relations]


def select_relative(triplets: Sequence[Mapping[str, Any]], fraction: float, max_relations: int) -> list[dict]:
    """Whole-graph length rule of D.8: every pair scoring within ``fraction`` of the image's best pair."""
    pairs = best_per_pair(triplets)
    if not pairs:
        return []
    return [r for r in pairs if r["score"] >= fraction * pairs[0]["score"]][:max_relations]


def corruptions(relations: Sequence[Mapping[str, Any]], pool: Sequence[str], share: float,
                rng: np.random.Generator) -> list[dict]:
    """Copies of a ``share`` of ``relations`` whose predicate is swapped for another from ``pool``.

    The count is stochastically rounded so the share holds in expectation even on small images;
    a relation is skipped when the pool offers no different predicate.
    """
    n_rel = len(relations)
    if share <= 0 or n_rel == 0:
        return []
    n = int(np.floor(share * n_rel + rng.random()))
    out = []
    for i in sorted(rng.permutation(n_rel)[:n].tolist()):
        r = relations[i]
        others = sorted({p for p in pool if p.strip().lower() != str(r["predicate"]).strip().lower()})
        if others:
            out.append({**r, "predicate": others[int(rng.integers(len(others)))], "original_predicate": r["predicate"]})
    return out


def render_relation(image: np.ndarray, boxes: np.ndarray, rel: Mapping[str, Any], rendering: str,
                    id_base: int = 1) -> tuple[np.ndarray, str]:
    """The image and prompt for one claim (templates relate/prompts/judge.txt, judge_plain.txt)."""
    from relate.markers import render_judge_all, render_judge_pair
    from relate.prompts import load_prompt

    s, o = int(rel["subject"]), int(rel["object"])
    ids = dict(subject_id=s + id_base, object_id=o + id_base, predicate=rel["predicate"])
    if rendering == "highlighted":
        return render_judge_pair(image, boxes, s, o, id_base=id_base), load_prompt("judge").render(**ids)
    if rendering == "plain":
        return render_judge_all(image, boxes, id_base=id_base), load_prompt("judge_plain").render(**ids)
    raise ValueError(f"unknown rendering {rendering!r}; valid: ['highlighted', 'plain']")


def _claims_at(depth: str, triplets: Sequence[Mapping[str, Any]], threshold: float | None,
               cfg: RelationArmConfig) -> list[dict]:
    if depth == "matched":
        return select_matched(triplets, cfg.matched_k)
    if threshold is None:
        raise ValueError("deployed depth needs each system's own threshold")
    return select_deployed(triplets, threshold, cfg.deployed_max)


def build_relation_calls(image_id: str, image: np.ndarray, boxes: np.ndarray,
                         systems: Mapping[str, Sequence[Mapping[str, Any]]],
                         thresholds: Mapping[str, float | None], cfg: RelationArmConfig,
                         truth: Sequence[Mapping[str, Any]] | None = None, id_base: int = 1) -> list[JudgeCall]:
    """Every per-relation call for one image: each system's claims at each depth, then corruptions.

    ``systems`` maps a system name to its scored triplets on this image; ``truth`` (the image's
    ground-truth relations, optional) only labels calls for the audit and feeds the scripted judge.
    """
    n_boxes = len(boxes)
    is_true = TruthIndex(truth) if truth is not None else None
    calls: list[JudgeCall] = []
    plain: np.ndarray | None = None
    for depth in cfg.depths:
        claims = {}
        for name in sorted(systems):
            rels = [r for r in _claims_at(depth, systems[name], thresholds.get(name), cfg)
                    if 0 <= r["subject"] < n_boxes and 0 <= r["object"] < n_boxes]
            claims[name] = rels
        pool = sorted({r["predicate"] for rels in claims.values() for r in rels})
        rng = np.random.default_rng(stable_seed(cfg.seed, image_id, depth))
        for name, rels in claims.items():
            items = [(r, "asserted") for r in rels]
            items += [(c, "corruption") for c in corruptions(rels, pool, cfg.corruption_share, rng)]
            for idx, (r, kind) in enumerate(items):
                img, prompt = render_relation(image, boxes, r, cfg.rendering, id_base)
                if cfg.rendering == "plain":  # one numbered image serves every claim (encoded once downstream)
                    plain = img if plain is None else plain
                    img = plain
                record = {"call_id": f"{image_id}/relation/{depth}/{name}/{kind}/{idx}", "image_id": image_id,
                          "arm": "relation", "depth": depth, "system": name, "kind": kind,
                          "subject": r["subject"], "object": r["object"], "predicate": r["predicate"],
                          "original_predicate": r.get("original_predicate"), "score": r.get("score"),
                          "truth": None if is_true is None else is_true(r["subject"], r["object"], r["predicate"])}
                context = {"task": "relation", "call_id": record["call_id"], "claim": dict(r),
                           "truth": [dict(t) for t in truth] if truth is not None else None}
                calls.append(JudgeCall(record, prompt, img, context))
    return calls
