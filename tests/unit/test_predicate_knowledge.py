"""One home for predicate knowledge: the gate, the text resources and the synthetic lexicon agree.

relate/text/data (synonym groups + inverse pairs) is the source. For every string that another
source knows, its inverse phrase must be the one ``relate.text.resources.restatement_of`` gives:
the gate's restatement (``CanonicalMap.inverse_surface``) and the lexicon's aligned form
(``relate.data.lexicon.inverse_form``) may abstain only where their own model has no inverse.
"""

from __future__ import annotations

import pytest

from relate.data.lexicon import CONCEPTS, SURFACE_TO_CONCEPT, all_surface_forms, inverse_form
from relate.gate_canonical import CanonicalMap, default_map, default_surface
from relate.text.resources import group_of, load_inverse_pairs, load_synonym_groups, restatement_of


def _disagreements(cm: CanonicalMap | None = None) -> list[tuple[str, str, str | None, str | None]]:
    cm = cm or default_map()
    out = []
    for s in sorted(set(default_surface()) | set(SURFACE_TO_CONCEPT)):
        want = restatement_of(s)
        if s in default_surface():
            got = cm.inverse_surface(s)
            cid, rev = cm.lookup(s)
            must_answer = cm.forms[cid].inverse is not None and not rev  # the three restated axes
            if got != want and (got is not None or must_answer):
                out.append((s, "gate", got, want))
        if s in SURFACE_TO_CONCEPT:
            got = inverse_form(s)
            if got != want and (got is not None or CONCEPTS[SURFACE_TO_CONCEPT[s]].inverse is not None):
                out.append((s, "lexicon", got, want))
    return out


def test_gate_and_lexicon_inverses_are_the_text_resources_inverses():
    assert _disagreements() == []


def test_the_strings_that_used_to_disagree_now_have_one_inverse():
    cm = default_map()
    for s, inv in [("over", "beneath"), ("occluding", "hidden behind"), ("blocking the view of", "partly hidden by"),
                   ("under", "above"), ("occluded by", "in front of"), ("up from", "down from"),
                   ("closer to the camera than", "farther from the camera than"), ("in back of", "ahead of")]:
        assert restatement_of(s) == inv and cm.inverse_surface(s) == inv, s
    assert inverse_form("in") == restatement_of("in") == "enclosing"


def test_gate_groups_follow_the_synonym_groups():
    """Each gate form with an inverse covers exactly one synonym group whose inverse group holds
    the canonical inverse; reversed surfaces ("contains") sit in the inverse group of their form."""
    groups = load_synonym_groups()
    cm = default_map()
    for s, (c, rev) in default_surface().items():
        form = cm.forms[cm.index[c]]
        g = group_of(s)
        if rev:
            assert g == groups[group_of(c)].inverse, s
        elif form.inverse is not None:
            assert g == group_of(c) and groups[g].inverse == group_of(form.inverse), s
    for a, b in load_inverse_pairs():  # every restated pair the text knows is a gate pair
        if a in default_surface() and cm.forms[cm.lookup(a)[0]].inverse is not None:
            assert cm.inverse_surface(a) == b and cm.inverse_surface(b) == a


def test_every_lexicon_form_is_a_gate_or_text_string_with_the_same_direction():
    cm = default_map()
    for s in all_surface_forms():
        assert group_of(s) is not None, s
        c = CONCEPTS[SURFACE_TO_CONCEPT[s]]
        cid, _ = cm.lookup(s)
        if c.family in ("spatial", "depth") and cm.forms[cid].inverse is not None:
            assert cm.lookup(inverse_form(s))[0] == cm.index[cm.forms[cid].inverse], s


def test_a_reintroduced_private_inverse_is_caught():
    """The check fails as soon as one source says something else again (here: the gate)."""
    cm = default_map()
    bad = CanonicalMap(cm.forms, dict(cm.surface), {**cm.surface_inverse, "over": "under", "under": "over"})
    assert ("over", "gate", "under", "beneath") in _disagreements(bad)


def test_a_tsv_that_breaks_the_gate_is_refused(tmp_path):
    from relate.text.resources import ResourceError, parse_inverse_pairs

    with pytest.raises(ResourceError, match="already paired"):
        parse_inverse_pairs(["over\tbeneath", "over\tunder"], tmp_path / "x.tsv", load_synonym_groups())
