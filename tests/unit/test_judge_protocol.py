"""A5b protocol and whole-graph controls against the scripted judge whose error rates are known."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest

from actors.judge import parse_verdict
from relate.judge import (GraphArmConfig, RelationArmConfig, ScriptedJudge, build_graph_calls, build_relation_calls,
                          parse_graph_verdict, select_deployed, select_matched, summarise_relation_arm, tally_graph_arm)
from relate.judge.protocol import select_relative
from relate.judge.graph_compare import pad, scramble
from relate.judge.protocol import corruptions
from relate.data.synthetic import SyntheticConfig, make_scene
from relate.judge.synthetic_systems import noisy_truth_predictions
from relate.markers import boxes_array
from relate.schema import CORPUS_SCHEMA, to_table

A, B = 0.8, 0.2
WORLD = SyntheticConfig(seed=3, min_size=64, max_size=80, min_objects=4, max_objects=6)


def _scenes(n):
    return [make_scene(i, WORLD) for i in range(n)]


def _system(scenes, seed=0, **kw):
    rows = [{"image_id": s.image_id, "uri": "-", "width": s.image.shape[1], "height": s.image.shape[0],
             "source": "synthetic", "split": "test", "boxes": s.boxes,
             "relations": [{**r, "pass": "human", "gate": "kept", "score": None} for r in s.relations]} for s in scenes]
    table = noisy_truth_predictions(to_table(rows, CORPUS_SCHEMA), seed=seed, **kw)
    return {r["image_id"]: r["triplets"] for r in table.to_pylist()}


def _ask(judge, calls):
    reqs = [SimpleNamespace(image_id=c.record["image_id"], reference=(c.context,), prompt=c.prompt) for c in calls]
    rows = []
    for c, text in zip(calls, judge.generate(reqs)):
        if c.record["arm"] == "relation":
            v = parse_verdict(text)
            verdict = None if v is None else ("yes" if v else "no")
        else:
            verdict = parse_graph_verdict(text)
        rows.append(c.audit_row("-", text, verdict))
    return rows


def test_selection_matched_is_topk_pairs_and_deployed_uses_threshold():
    tri = [{"subject": 0, "object": 1, "predicate": "on", "score": 0.9},
           {"subject": 0, "object": 1, "predicate": "near", "score": 0.95},
           {"subject": 1, "object": 2, "predicate": "holding", "score": 0.3},
           {"subject": 2, "object": 2, "predicate": "on", "score": 0.99},
           {"subject": 2, "object": 0, "predicate": "behind", "score": 0.5}]
    m = select_matched(tri, 2)
    assert [(r["subject"], r["object"], r["predicate"]) for r in m] == [(0, 1, "near"), (2, 0, "behind")]
    assert [r["predicate"] for r in select_deployed(tri, 0.4, 20)] == ["near", "behind"]
    assert len(select_deployed(tri, 0.0, 1)) == 1
    # whole-graph rule: pairs within 70% of the best pair (0.95 -> cut at 0.665)
    assert [r["predicate"] for r in select_relative(tri, 0.7, 20)] == ["near"]
    assert [r["predicate"] for r in select_relative(tri, 0.3, 20)] == ["near", "behind", "holding"]


def test_corruption_draws_another_predicate_of_the_image_at_the_fixed_share():
    rels = [{"subject": 0, "object": i, "predicate": p, "score": 1.0} for i, p in enumerate(["on", "near", "in", "on"] * 50)]
    rng = np.random.default_rng(0)
    out = corruptions(rels, ["on", "near", "in"], 0.25, rng)
    assert len(out) == 50
    assert all(c["predicate"] != c["original_predicate"] and c["predicate"] in {"on", "near", "in"} for c in out)
    assert corruptions(rels[:1], ["on"], 1.0, rng) == []  # no other predicate: nothing to swap in


def test_scripted_judge_rates_are_recovered_within_binomial_intervals():
    scenes = _scenes(40)
    preds = _system(scenes, keep=0.9, swap=0.3, extra_per_image=3)
    cfg = RelationArmConfig(depths=["matched"], matched_k=8, corruption_share=0.5, seed=1)
    judge = ScriptedJudge({"accept_true": A, "accept_false": B, "seed": 7})
    rows = []
    for s in scenes:
        calls = build_relation_calls(s.image_id, s.image, boxes_array(s.boxes), {"sys": preds[s.image_id]},
                                     {"sys": None}, cfg, truth=s.relations)
        rows += _ask(judge, calls)
    reference = Counter(r["predicate"] for s in scenes for r in s.relations)
    out = summarise_relation_arm(rows, reference,
                                 {s.image_id: s.relations for s in scenes}, ["sys"])
    c = out["depths"]["matched"]["controls"]
    a_hat, b_hat = c["acceptance_of_true"], c["corruption_acceptance_false_only"]
    assert a_hat["n"] >= 80 and b_hat["n"] >= 40
    assert a_hat["low"] <= A <= a_hat["high"], a_hat
    assert b_hat["low"] <= B <= b_hat["high"], b_hat
    assert a_hat["high"] < 0.95 and b_hat["low"] > 0.05  # intervals narrow enough to mean something
    assert c["corruption_acceptance"]["n"] >= b_hat["n"]  # pooled rate reported alongside


def _graph_rows(judge_cfg, n=16):
    scenes = _scenes(n)
    good, bad = _system(scenes, seed=0, keep=1.0, swap=0.0, extra_per_image=0), _system(scenes, seed=1, swap=0.6)
    cfg = GraphArmConfig(depth="matched", votes=3)
    rows = []
    judge = ScriptedJudge(judge_cfg)
    for s in scenes:
        graphs = {"good": select_matched(good[s.image_id], 8), "bad": select_matched(bad[s.image_id], 8)}
        calls = build_graph_calls(s.image_id, s.image, boxes_array(s.boxes), [b["category"] for b in s.boxes],
                                  graphs, cfg, truth=s.relations)
        rows += _ask(judge, calls)
    return tally_graph_arm(rows, cfg)


def test_unbiased_scripted_judge_is_certified_and_prefers_the_true_graph():
    res = _graph_rows({"seed": 0})
    assert res["certified"], res["reasons"]
    assert res["controls"]["scramble"]["rate"] >= 0.75 and res["controls"]["primacy"] == pytest.approx(0.5, abs=0.1)
    v = res["verdicts"]["bad|good"]
    assert v["decisive"] > 0 and v["wins"]["good"] > v["wins"]["bad"]


def test_first_position_bias_is_refused_certification_and_never_scored():
    res = _graph_rows({"seed": 0, "first_bias": 0.8})
    assert not res["certified"] and res["status"] == "uncertified"
    assert res["controls"]["primacy"] > 0.6
    assert any("primacy" in r for r in res["reasons"])
    assert res["verdicts"] is None


def test_scramble_and_padding_controls():
    rng = np.random.default_rng(0)
    g = [{"subject": 0, "object": 1, "predicate": "on"}, {"subject": 1, "object": 2, "predicate": "near"},
         {"subject": 2, "object": 0, "predicate": "in"}]
    sc = scramble(g, rng)
    assert [(r["subject"], r["object"]) for r in sc] == [(r["subject"], r["object"]) for r in g]
    assert sorted(r["predicate"] for r in sc) == ["in", "near", "on"] and sc != g
    assert scramble([{"subject": 0, "object": 1, "predicate": "on"}] * 2, rng) is None
    padded = pad(g, 4, ["on", "near"], 2, rng)
    assert padded[:3] == g and len(padded) == 5
    assert {(r["subject"], r["object"]) for r in padded[3:]}.isdisjoint({(0, 1), (1, 2), (2, 0)})


@pytest.mark.parametrize("text,want", [('{"better": 1}', "first"), ('blah {"better": 2} then {"better": "tie"}', "tie"),
                                       ("{'winner': '2'}", "second"), ("no json at all", None), (None, None)])
def test_graph_verdict_reads_the_last_json_object(text, want):
    assert parse_graph_verdict(text) == want
