"""Synonym groups, inverse pairs, directional flags: coverage and validation errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from relate.data.lexicon import CONCEPTS, all_surface_forms
from relate.text.resources import (ResourceError, base_form, group_of, inverse_of, is_directional,
                                   load_inverse_pairs, load_modifiers, load_synonym_groups, p_directional,
                                   parse_inverse_pairs, parse_synonym_groups, synonym_pairs)

# Common VG150 / PSG-style predicates our groups must know (spatial, contact, action).
COMMON = ["above", "under", "behind", "in front of", "on", "in", "near", "next to", "beside",
          "sitting on", "standing on", "lying on", "laying on", "hanging from", "attached to",
          "parked on", "painted on", "holding", "carrying", "wearing", "riding", "eating", "looking at",
          "watching", "using", "walking on", "flying in", "covered in", "made of", "has", "with", "of",
          "part of", "over", "against", "along", "across", "between", "at", "mounted on", "growing on",
          "playing", "says", "pulling", "pushing", "kicking", "throwing", "crossing", "entering", "exiting",
          "leaning on", "drinking", "cutting", "chasing", "driving", "feeding", "touching", "talking to"]


def test_every_lexicon_form_is_grouped_and_concepts_stay_together():
    for concept in CONCEPTS.values():
        groups = {group_of(f) for f in concept.forms}
        assert len(groups) == 1 and None not in groups, (concept.name, groups)
        group = load_synonym_groups()[groups.pop()]
        assert group.directional == concept.directional, concept.name
        if concept.inverse is not None:
            assert {group_of(f) for f in CONCEPTS[concept.inverse].forms} == {group.inverse}
    assert all(group_of(f) for f in all_surface_forms())


def test_common_benchmark_predicates_are_covered():
    missing = [p for p in COMMON if group_of(p) is None]
    assert not missing


def test_groups_are_disjoint_and_inverses_involutive():
    groups = load_synonym_groups()
    forms = [f for g in groups.values() for f in g.forms]
    assert len(forms) == len(set(forms)) and len(groups) >= 80
    for g in groups.values():
        if g.inverse:
            assert groups[g.inverse].inverse == g.name and g.directional


def test_inverse_pairs_are_consistent():
    pairs = load_inverse_pairs()
    assert len(pairs) >= 80
    flat = [s for p in pairs for s in p]
    assert len(flat) == len(set(flat))
    groups = load_synonym_groups()
    for a, b in pairs:
        assert groups[group_of(a)].inverse == group_of(b)
        assert inverse_of(inverse_of(a)) == a and inverse_of(a) == b
    assert ("left of", "right of") in pairs and ("above", "below") in pairs


def test_directional_flags_and_probabilities():
    assert is_directional("left of") and is_directional("far above") and not is_directional("next to")
    got = p_directional(["above", "near", "talking to", "standing just behind"])
    np.testing.assert_allclose(got, [1.0, 0.0, 0.5, 1.0])
    assert got.dtype == np.float32
    with pytest.raises(KeyError, match="no directional flag"):
        p_directional(["florbing"])
    np.testing.assert_allclose(p_directional(["florbing"], unknown=0.5), [0.5])
    with pytest.raises(KeyError, match="no synonym group"):
        is_directional("florbing")


def test_modified_forms_resolve_to_their_base():
    assert base_form("standing far above") == "above"
    assert base_form("very slightly to the left of") == "to the left of"
    assert inverse_of("partly behind") == "partly in front of"
    assert base_form("florbing above") is None
    assert load_modifiers().families


def test_synonym_pairs_restrict_to_given_strings():
    pairs = synonym_pairs(["above", "over", "below"])
    assert pairs == [("above", "over")]


P = Path("groups.yaml")


def test_string_in_two_groups_is_an_error():
    tree = {"groups": {"a": {"forms": ["x", "y"]}, "b": {"forms": ["y"]}}}
    with pytest.raises(ResourceError, match="'y' is in two groups"):
        parse_synonym_groups(tree, P)


def test_inverse_of_inverse_must_be_itself():
    tree = {"groups": {"a": {"forms": ["x"], "inverse": "b"}, "b": {"forms": ["y"], "inverse": "c"},
                       "c": {"forms": ["z"], "inverse": "b"}}}
    with pytest.raises(ResourceError, match="inverse of inverse"):
        parse_synonym_groups(tree, P)


def test_unquoted_yaml_boolean_form_is_an_error():
    tree = {"groups": {"a": {"forms": [True, "x"]}}}
    with pytest.raises(ResourceError, match="quote them"):
        parse_synonym_groups(tree, P)


def test_symmetric_group_with_inverse_is_an_error():
    tree = {"groups": {"a": {"forms": ["x"], "inverse": "b", "directional": False}, "b": {"forms": ["y"], "inverse": "a"}}}
    with pytest.raises(ResourceError, match="directional: false"):
        parse_synonym_groups(tree, P)


def test_inverse_pair_file_errors_name_the_line():
    groups = parse_synonym_groups({"groups": {"a": {"forms": ["x", "x2"], "inverse": "b"},
                                              "b": {"forms": ["y"], "inverse": "a"},
                                              "c": {"forms": ["z"]}}}, P)
    assert parse_inverse_pairs(["# c", "x\ty"], Path("p.tsv"), groups) == (("x", "y"),)
    with pytest.raises(ResourceError, match=r"p.tsv:2: 'x2' already paired|p.tsv:2: 'y' already paired"):
        parse_inverse_pairs(["x\ty", "x2\ty"], Path("p.tsv"), groups)
    with pytest.raises(ResourceError, match="p.tsv:1: .*not declared inverses"):
        parse_inverse_pairs(["x\tz"], Path("p.tsv"), groups)
    with pytest.raises(ResourceError, match="p.tsv:1: 'q' is not in any synonym group"):
        parse_inverse_pairs(["q\ty"], Path("p.tsv"), groups)
    with pytest.raises(ResourceError, match="2 tab-separated"):
        parse_inverse_pairs(["x y"], Path("p.tsv"), groups)


def test_missing_file_is_named(tmp_path):
    with pytest.raises(ResourceError, match="not found"):
        load_synonym_groups(tmp_path / "nope.yaml")
