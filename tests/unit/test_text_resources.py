"""The text space's reading of the predicate knowledge: coverage, base forms, restatements, flags.

The knowledge file's own rules and refusals are tested in tests/unit/test_predicate_knowledge.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from relate.predicate_knowledge import load_inverse_pairs, load_synonym_groups
from relate.text.resources import (DATA_DIR, ResourceError, base_form, group_of, inverse_of, is_directional,
                                   load_modifiers, p_directional, synonym_pairs)

# Common VG150 / PSG-style predicates our groups must know (spatial, contact, action).
COMMON = ["above", "under", "behind", "in front of", "on", "in", "near", "next to", "beside",
          "sitting on", "standing on", "lying on", "laying on", "hanging from", "attached to",
          "parked on", "painted on", "holding", "carrying", "wearing", "riding", "eating", "looking at",
          "watching", "using", "walking on", "flying in", "covered in", "made of", "has", "with", "of",
          "part of", "over", "against", "along", "across", "between", "at", "mounted on", "growing on",
          "playing", "says", "pulling", "pushing", "kicking", "throwing", "crossing", "entering", "exiting",
          "leaning on", "drinking", "cutting", "chasing", "driving", "feeding", "touching", "talking to"]


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


def test_modifiers_must_name_known_families_and_groups(tmp_path):
    good = (DATA_DIR / "modifiers.yaml").read_text()
    bad = tmp_path / "modifiers.yaml"
    bad.write_text(good.replace("families: [spatial,", "families: [spatail,"))
    with pytest.raises(ResourceError, match=r"modifiers.yaml: families \['spatail'\] are not in .*predicate_knowledge.yaml"):
        load_modifiers(bad)


def test_missing_file_is_named(tmp_path):
    with pytest.raises(ResourceError, match="not found"):
        load_modifiers(tmp_path / "nope.yaml")
