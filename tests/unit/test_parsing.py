"""Robust parsing of annotator output: recoverable formats, counted failures, fuzzing."""

from __future__ import annotations

import json
import random

from relate.parsing import ITEM_REASONS, OUTPUT_REASONS, parse_relations

REL = {"subject_id": 1, "subject_label": "person", "predicate": "holding", "object_id": 2, "object_label": "cup"}


def _triples(res):
    return [(r.subject, r.predicate, r.object) for r in res.relations]


def test_plain_json_is_converted_to_zero_based_ids():
    res = parse_relations(json.dumps({"relations": [REL]}))
    assert res.usable and _triples(res) == [(0, "holding", 1)] and not res.problems


def test_last_json_object_in_free_text_wins():
    text = ('Draft: {"relations": [{"subject_id": 1, "predicate": "near", "object_id": 2}]}\n'
            'Final answer:\n```json\n{"relations": [{"subject_id": 2, "predicate": "riding", "object_id": 3},]}\n```\nDone.')
    res = parse_relations(text)
    assert _triples(res) == [(1, "riding", 2)]


def test_trailing_commas_string_ids_and_python_literals():
    text = "{'relations': [{'subject_id': '#3', 'predicate': 'on', 'object_id': 'object 1',},],}"
    res = parse_relations(text)
    assert _triples(res) == [(2, "on", 0)]


def test_bare_list_and_alternative_keys():
    res = parse_relations('[{"subject": "1", "relation": "wearing", "object": 4.0}]', id_base=1)
    assert _triples(res) == [(0, "wearing", 3)]


def test_out_of_range_ids_are_kept_for_the_gate_to_reject():
    res = parse_relations(json.dumps({"relations": [dict(REL, object_id=99)]}))
    assert _triples(res) == [(0, "holding", 98)]


def test_label_disagreeing_with_id_is_counted_and_optionally_dropped():
    text = json.dumps({"relations": [dict(REL, subject_label="dog")]})
    keep = parse_relations(text, labels=["person", "cup"])
    assert len(keep.relations) == 1 and keep.problems["label_mismatch"] == 1
    drop = parse_relations(text, labels=["person", "cup"], drop_label_mismatch=True)
    assert drop.relations == [] and drop.problems["label_mismatch"] == 1


def test_unusable_outputs_have_reasons():
    assert parse_relations(None).reason == "not_text"
    assert parse_relations("   ").reason == "empty"
    assert parse_relations("I cannot tell from this image.").reason == "no_json"
    assert parse_relations('```json\n{"relations": [{"subject_id": 1, "predicate": "on"').reason == "no_json"
    assert parse_relations('{"answer": "yes"}').reason == "no_relations"


def test_bad_items_are_counted_not_fatal():
    items = [REL, "text", {"subject_id": 1, "object_id": 2}, {"subject_id": "one", "predicate": "on", "object_id": 2},
             {"subject_id": 1, "predicate": "", "object_id": 2}, {"subject_id": True, "predicate": "on", "object_id": 2}]
    res = parse_relations(json.dumps({"relations": items}))
    assert len(res.relations) == 1
    assert res.problems == {"not_an_object": 1, "missing_field": 1, "bad_id": 2, "bad_predicate": 1}


def test_injected_tag_passes_through():
    res = parse_relations(json.dumps({"relations": [dict(REL, injected="semantic_disjoint")]}))
    assert res.relations[0].tag == "semantic_disjoint"


def _mutate(rng: random.Random, text: str) -> str:
    ops = [
        lambda t: t[: rng.randrange(len(t) + 1)],                                  # truncate
        lambda t: t.replace(rng.choice(list(t) or ["x"]), rng.choice('{}[]",:\'\\ 0a'), rng.randrange(1, 4)),
        lambda t: "".join(c for c in t if rng.random() > 0.05),                     # drop characters
        lambda t: t + rng.choice(["}", "]", ",", "```", '"', "{" * 50, "[" * 3000]),
        lambda t: rng.choice(["```json\n", "Sure! ", "{", "[", ""]) + t,
        lambda t: t.replace("1", rng.choice(['"1"', "-1", "1e309", "null", "[1]", "{}", "NaN", "99999999999999999999"])),
        lambda t: t.replace('"predicate"', rng.choice(['"pred"', '"predicate"', '"predicate": 5, "x"'])),
        lambda t: "".join(rng.choice([c, c * 2, chr(rng.randrange(0x20, 0x2FFF))]) for c in t),
    ]
    for _ in range(rng.randrange(1, 4)):
        text = rng.choice(ops)(text)
    return text


def test_fuzz_ten_thousand_malformed_outputs_never_crash():
    rng = random.Random(1234)
    base = [json.dumps({"relations": [REL, dict(REL, subject_id=3, predicate="on top of")]}),
            "Here you go:\n```json\n" + json.dumps({"relations": [REL]}, indent=2) + "\n```",
            "[" + json.dumps(REL) + "]"]
    reasons = set()
    for i in range(10_000):
        text = _mutate(rng, rng.choice(base))
        res = parse_relations(text, labels=["person", "cup", "table"])
        assert res.reason in (None,) + OUTPUT_REASONS
        assert set(res.problems) <= set(OUTPUT_REASONS) | set(ITEM_REASONS)
        for r in res.relations:
            assert isinstance(r.subject, int) and isinstance(r.object, int) and isinstance(r.predicate, str)
        reasons.add(res.reason)
    assert res is not None and "parser_error" not in reasons  # no internal error was swallowed
    assert {None, "no_json"} <= reasons
