"""relate.entailment: what stated relations imply, worked by hand on the shipped knowledge file."""

from __future__ import annotations

import pytest

from relate.entailment import implied_relations
from relate.predicate_knowledge import load_predicate_knowledge

pytestmark = pytest.mark.unit

_K = load_predicate_knowledge()


def _group(form: str) -> str | None:
    g = _K.group_of(form)
    return None if g is None else g.name


def _any_form(group: str, preferred: str | None) -> str:
    return preferred or _K.groups[group].forms[0]


def test_converse_is_stated_from_the_other_end_with_the_paired_string():
    assert implied_relations([(2, 5, "to the left of")], _group, _any_form) == [(5, 2, "to the right of")]
    # a string without a pair: the first form of the inverse group
    assert implied_relations([(1, 0, "under")], _group, _any_form) == [(0, 1, "above")]
    # symmetric: the same string, reversed
    assert implied_relations([(0, 3, "next to")], _group, _any_form) == [(3, 0, "next to")]


def test_on_implies_touching_both_ways_and_supporting():
    got = implied_relations([(0, 1, "resting on")], _group, _any_form)
    # "resting on" is paired with "bearing the weight of" in the file's inverse_pairs
    assert set(got) == {(0, 1, "touching"), (1, 0, "bearing the weight of"), (1, 0, "touching")}
    assert len(got) == 3  # each once


def test_nothing_already_stated_is_repeated_and_unknown_strings_imply_nothing():
    stated = [(0, 1, "on"), (0, 1, "touching"), (1, 0, "touching"), (4, 5, "glowing at"), (2, 2, "on")]
    assert implied_relations(stated, _group, _any_form) == [(1, 0, "supporting")]


def test_a_group_the_caller_does_not_train_is_never_stated():
    """An OvR-SGG split that holds out ``touching``: nothing states it, and the rest still follows."""
    def no_touching(group, preferred):
        return None if group == "touching" else _any_form(group, preferred)

    assert implied_relations([(0, 1, "holding")], _group, no_touching) == [(1, 0, "held by")]


def test_holding_gives_held_by_and_touching_and_is_closed():
    got = set(implied_relations([(3, 7, "holding")], _group, _any_form))
    assert got == {(7, 3, "held by"), (3, 7, "touching"), (7, 3, "touching")}
    # closure: applying it again to everything adds nothing
    assert implied_relations([(3, 7, "holding"), *got], _group, _any_form) == []
