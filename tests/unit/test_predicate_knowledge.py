"""relate/predicate_knowledge.yaml and its loader: refusals, facts checked by hand, and its readers.

Every reader takes its facts from the one file, so no test has to keep copies in agreement. What
is left to test: the loader refuses each kind of broken file and says where; the facts in the
shipped file are the ones seed 001 states (hand-copied below from Alg. 1, the spatial-pass
prompt of App. E and § 3.3) and the ones the synthetic world is built on; and each former home
of these facts still answers a few hand-worked cases as it did when it kept its own table.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from actors.vlm import ERROR_TYPES, ErrorRates, ScriptedAnnotator, ScriptedConfig, VLMRequest
from relate.annotation_stats import direction_balance
from relate.data.lexicon import (BOX_FAMILIES, CONCEPTS, FAMILIES, LAYOUT_FAMILIES, PIXEL_FAMILIES, concept_of,
                                 inverse_form)
from relate.data.synthetic_truth import IMPLIED_CONTACT
from relate.gate_canonical import default_map
from relate.predicate_knowledge import KNOWLEDGE_FILE, PredicateKnowledgeError, load_predicate_knowledge
from relate.text.resources import restatement_of

pytestmark = pytest.mark.unit

# A small valid file; each refusal test breaks one line of it. Line numbers are the file's own.
_VALID = """\
families:
  spatial: {decided_by: boxes, layout: true}
  action: {decided_by: meaning, layout: false}
groups:
  above:
    family: spatial
    inverse: below
    forms: [above, over]
  below:
    family: spatial
    inverse: above
    forms: [below, beneath, under]
  near:
    family: spatial
    symmetric: true
    forms: [near, next to]
  holding:
    family: action
    contact: true
    inverse: held_by
    forms: [holding, grasping]
  held_by:
    family: action
    contact: true
    inverse: holding
    forms: [held by]
inverse_pairs:
  - [above, below]
  - [over, beneath]
  - [holding, held by]
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "knowledge.yaml"
    path.write_text(text)
    return path


def _refused(tmp_path: Path, old: str, new: str, line: int, message: str) -> None:
    assert _VALID.count(old) == 1, old
    path = _write(tmp_path, _VALID.replace(old, new))
    with pytest.raises(PredicateKnowledgeError, match=re.escape(f"{path}:{line}: ") + message):
        load_predicate_knowledge(path)


def test_the_small_file_loads(tmp_path):
    k = load_predicate_knowledge(_write(tmp_path, _VALID))
    assert list(k.groups) == ["above", "below", "near", "holding", "held_by"]
    assert k.inverse_pairs == (("above", "below"), ("over", "beneath"), ("holding", "held by"))
    assert k.groups["near"].symmetric and k.groups["near"].p_directional == 0.0 and k.groups["near"].inverse is None
    assert k.groups["held_by"].contact and not k.groups["below"].contact
    assert k.inverse_form("Over ") == "beneath" and k.inverse_form("under") is None
    assert k.families_decided_by("boxes") == ("spatial",)


def test_unknown_family_is_refused_at_its_group(tmp_path):
    _refused(tmp_path, "  near:\n    family: spatial", "  near:\n    family: spatail", 13,
             r"group 'near' has unknown family 'spatail'; valid: \['spatial', 'action'\]")


def test_unknown_decider_is_refused_at_its_family(tmp_path):
    _refused(tmp_path, "action: {decided_by: meaning", "action: {decided_by: vibes", 3,
             r"family 'action' decided_by 'vibes'")


def test_own_inverse_without_symmetry_is_refused(tmp_path):
    _refused(tmp_path, "    symmetric: true\n", "    inverse: near\n", 13,
             "group 'near' is its own inverse but not symmetric")


def test_symmetric_group_naming_an_inverse_is_refused(tmp_path):
    _refused(tmp_path, "    symmetric: true\n", "    symmetric: true\n    inverse: above\n", 13,
             "group 'near' is symmetric yet names inverse 'above'")


def test_inverse_that_is_not_mutual_is_refused(tmp_path):
    _refused(tmp_path, "    inverse: above\n", "", 5, r"the inverse is not mutual: 'above' -> 'below' -> None")


def test_inverse_naming_no_group_is_refused(tmp_path):
    _refused(tmp_path, "    inverse: held_by\n", "    inverse: heldby\n", 17,
             "group 'holding' names unknown inverse 'heldby'")


def test_inverse_groups_must_agree_on_contact(tmp_path):
    _refused(tmp_path, "  held_by:\n    family: action\n    contact: true\n", "  held_by:\n    family: action\n", 17,
             r"inverse groups 'holding' and 'held_by' differ in contact \(True vs False\)")


def test_form_in_two_groups_is_refused_at_the_second(tmp_path):
    _refused(tmp_path, "forms: [near, next to]", "forms: [near, next to,\n            over]", 17,
             "'over' is in two groups: 'above' and 'near'")


def test_group_given_twice_is_refused(tmp_path):
    _refused(tmp_path, "inverse_pairs:\n", "  near:\n    family: spatial\n    forms: [close to]\ninverse_pairs:\n", 27,
             r"'near' is given twice \(first on line 13\)")


def test_string_paired_twice_is_refused(tmp_path):
    _refused(tmp_path, "  - [holding, held by]\n", "  - [holding, held by]\n  - [above, under]\n", 31,
             "'above' is already paired with 'below'")


def test_duplicate_pair_is_refused(tmp_path):
    _refused(tmp_path, "  - [holding, held by]\n", "  - [holding, held by]\n  - [over, beneath]\n", 31,
             "'over' is already paired with 'beneath'")


def test_pair_of_groups_that_are_not_inverses_is_refused(tmp_path):
    _refused(tmp_path, "  - [holding, held by]\n", "  - [holding, held by]\n  - [near, under]\n", 31,
             r"the groups of \('near', 'under'\), 'near' and 'below', are not declared inverses")


def test_pair_naming_a_string_in_no_group_is_refused(tmp_path):
    _refused(tmp_path, "  - [over, beneath]\n", "  - [over, underneath]\n", 29, "'underneath' is in no group")


def test_unquoted_yaml_boolean_form_is_refused_at_its_line(tmp_path):
    _refused(tmp_path, "forms: [near, next to]", "forms: [near,\n            on]", 17,
             "group 'near' has form True, not a string; quote it")


def test_unknown_key_is_refused_at_its_line(tmp_path):
    _refused(tmp_path, "    symmetric: true\n", "    symmetric: true\n    directional: false\n", 16,
             r"group 'near' has unknown key 'directional'")


def test_missing_file_and_bad_yaml_are_named(tmp_path):
    with pytest.raises(PredicateKnowledgeError, match="nope.yaml: predicate knowledge file not found"):
        load_predicate_knowledge(tmp_path / "nope.yaml")
    _refused(tmp_path, "forms: [above, over]", "forms: [above, over", 9, "not valid YAML")


# -- the shipped file against what seed 001 and the synthetic world say -------------------------
def _group(form: str):
    g = load_predicate_knowledge().group_of(form)
    assert g is not None, form
    return g


def test_contact_is_what_algorithm_1_says_requires_touching():
    # Alg. 1 line 5: "requires contact (on, sitting on, hanging from, ...)"; line 18: "(wearing,
    # holding, sitting on, ...)"; § 3.3: "a pair annotated riding is also, implicitly, sitting on".
    for form in ("on", "sitting on", "hanging from", "wearing", "holding", "riding"):
        assert _group(form).contact, form
    # projective, proximity and containment forms need no touching boxes (lines 7-11 test other geometry)
    for form in ("above", "beneath", "to the left of", "in front of", "next to", "inside"):
        assert not _group(form).contact, form


def test_families_are_those_of_the_spatial_pass_prompt():
    # App. E, spatial pass: "depth in front of / behind", "contact on / resting on / leaning
    # against / hanging from", "proximity next to / beside / near", "containment inside",
    # "vertical above / below / beneath", "horizontal to the left of / to the right of".
    said = {"depth": ["in front of", "behind"], "contact": ["on", "resting on", "leaning against", "hanging from"],
            "proximity": ["next to", "beside", "near"], "containment": ["inside"],
            "spatial": ["above", "below", "beneath", "to the left of", "to the right of"]}
    for family, forms in said.items():
        assert {_group(f).family for f in forms} == {family}, family
        assert load_predicate_knowledge().families[family].layout, family  # the layout pass states them


def test_on_and_under_are_not_inverses():
    # The prompt lists "on" under contact and "beneath" under vertical: "under" is the inverse of
    # "above", not of "on", whose swap is "supporting" (both contact).
    assert (_group("under").name, _group("under").inverse) == ("below", "above")
    assert _group("on").inverse == "supporting" and _group("supporting").contact
    assert restatement_of("under") == "above" and restatement_of("on") == "supporting"


def test_inverses_and_symmetry_of_the_projective_and_proximity_forms():
    # Prompt rule 3: "if A is in front of B, do not add B behind A"; Alg. 1 lines 11-12: left/right
    # and above/below have inverse forms.
    k = load_predicate_knowledge()
    for a, b in (("in front of", "behind"), ("left of", "right of"), ("above", "below")):
        assert k.inverse_form(a) == b and k.inverse_form(b) == a
    for form in ("near", "next to", "touching", "same colour as"):
        assert _group(form).symmetric and _group(form).inverse is None, form
    assert not _group("left of").symmetric


def test_families_are_decided_as_the_synthetic_world_builds_them():
    # relate/data/synthetic.py: spatial "from the boxes alone", depth and appearance "only from pixels"
    k = load_predicate_knowledge()
    assert k.families["spatial"].decided_by == "boxes"
    assert k.families["depth"].decided_by == k.families["appearance"].decided_by == "pixels"


def test_the_shipped_file_is_packaged_next_to_its_loader():
    assert KNOWLEDGE_FILE.parent == Path(__file__).resolve().parents[2] / "relate"
    assert load_predicate_knowledge().path == KNOWLEDGE_FILE


# -- each former home answers as it did ---------------------------------------------------------
def test_gate_restatements_and_forms():
    cm = default_map()
    for s, inv in [("over", "beneath"), ("occluding", "hidden behind"), ("blocking the view of", "partly hidden by"),
                   ("under", "above"), ("occluded by", "in front of"), ("up from", "down from"),
                   ("closer to the camera than", "farther from the camera than"), ("in back of", "ahead of")]:
        assert cm.inverse_surface(s) == inv, s
    assert cm.inverse_surface("contains") == "inside" and cm.lookup("contains") == (cm.index["inside"], True)
    assert not cm.has_inverse[cm.lookup("atop")[0]]  # Alg. 1 line 13: support phrasings are rejected, not swapped
    forms = {f.name: f for f in cm.forms}
    assert [n for n, f in forms.items() if f.inverse] == ["left of", "right of", "above", "below", "in front of", "behind"]
    assert forms["above"].inverse == "below" and forms["on top of"].inverse is None
    contact = [n for n, f in forms.items() if f.contact]
    assert contact == ["on", "on top of", "resting on", "sitting on", "standing on", "lying on", "leaning against",
                       "hanging from", "attached to", "mounted on", "touching", "covering", "supporting", "holding",
                       "wearing", "riding"]


def test_lexicon_concepts():
    assert inverse_form("in") == "enclosing" and inverse_form("over") == "beneath"
    assert inverse_form("on") is None  # "supporting" is no concept of the world
    assert CONCEPTS["on"].inverse is None and CONCEPTS["below"].inverse == "above"
    assert CONCEPTS["near"].symmetric and not CONCEPTS["left_of"].symmetric
    assert concept_of("Dressed in").family == "action"
    assert FAMILIES == ("spatial", "depth", "appearance", "contact", "proximity", "containment", "action", "part")
    assert PIXEL_FAMILIES == ("depth", "appearance")
    assert set(BOX_FAMILIES) == {"spatial", "contact", "containment", "proximity"}
    assert LAYOUT_FAMILIES == ("spatial", "depth", "contact", "proximity", "containment")


def test_synthetic_truth_implied_contact():
    assert IMPLIED_CONTACT == {"on": "touching", "holding": "touching", "wearing": "touching"}


def test_direction_balance_counts_each_side():
    got = direction_balance(["left of", "to the left of", "right of", "under", "over", "contains", "behind", "on"])
    assert got == {"left of/right of": {"left of": 2, "right of": 1, "rel_gap": 0.5},
                   "above/below": {"above": 1, "below": 1, "rel_gap": 0.0},
                   "in front of/behind": {"in front of": 0, "behind": 1, "rel_gap": 1.0}}


def test_scripted_annotator_states_layout_from_the_left_upper_front_object():
    boxes = [dict(x1=0, y1=0, x2=10, y2=10), dict(x1=40, y1=40, x2=50, y2=50)]
    ref = [dict(subject=1, object=0, predicate=p) for p in ("right of", "beneath", "partly hidden by", "left of", "near")]
    cfg = ScriptedConfig(errors=ErrorRates(**{k: 0.0 for k in ERROR_TYPES}), direction_bias=1.0)
    req = VLMRequest(image_png=b"", prompt="p", image_id="x", pass_name="spatial", boxes=boxes, reference=ref, draft=())
    got = {(it["subject"], it["predicate"], it["object"]) for it in ScriptedAnnotator(cfg).plan(req).items}
    assert got == {(0, "left of", 1), (0, "over", 1), (0, "blocking the view of", 1), (1, "left of", 0), (1, "near", 0)}


# -- entailments ----------------------------------------------------------------------------------
_ENTAIL = _VALID + """entailments:
  - {from: holding, to: near, why: "a held thing is within reach"}
"""


def test_an_entailment_is_derived_from_the_other_end(tmp_path):
    k = load_predicate_knowledge(_write(tmp_path, _ENTAIL))
    assert [(e.premise, e.conclusion, e.derived) for e in k.entailments] == [
        ("holding", "near", False), ("held_by", "near", True)]  # near is symmetric: held_by -> near
    assert k.entailed_by("holding") == ("near",) and k.entailed_by("near") == ()
    assert k.converse_of("holding") == "held_by" and k.converse_of("near") == "near"


def test_a_directional_conclusion_is_derived_as_its_inverse(tmp_path):
    k = load_predicate_knowledge(_write(tmp_path, _VALID + "entailments:\n"
                                        "  - {from: holding, to: above, why: x}\n"))
    assert k.entailed_by("held_by") == ("below",)


def test_entailment_refusals_name_the_line(tmp_path):
    line = _VALID.count("\n") + 2
    for bad, message in ((r'{from: holding, to: nowhere, why: x}', "entailment to 'nowhere' is not a group"),
                         (r'{from: holding, to: holding, why: x}', "'holding' entails itself"),
                         (r'{from: holding, to: near}', "entailment 'holding' -> 'near' needs a 'why'"),
                         (r'{from: holding, to: near, why: x, how: y}', "entailment has unknown key 'how'")):
        path = _write(tmp_path, _VALID + "entailments:\n  - " + bad + "\n")
        with pytest.raises(PredicateKnowledgeError, match=re.escape(f"{path}:{line}: ") + message):
            load_predicate_knowledge(path)
    # an inverse premise needs a conclusion that can be stated from the other end
    text = _VALID.replace("  near:\n    family: spatial\n    symmetric: true\n", "  near:\n    family: spatial\n")
    path = _write(tmp_path, text + "entailments:\n  - {from: holding, to: near, why: x}\n")
    with pytest.raises(PredicateKnowledgeError, match="cannot be stated from the other end"):
        load_predicate_knowledge(path)


def test_shipped_entailments_are_the_contact_relations_touching_follows_from():
    """Every premise is a group Algorithm 1 gates as a contact relation (``contact: true``), and
    every conclusion is ``touching``: what "resting on", "holding", "wearing" say of the two things."""
    k = load_predicate_knowledge()
    assert k.entailments and all(e.conclusion == "touching" for e in k.entailments)
    assert all(k.groups[e.premise].contact for e in k.entailments)
    assert {"on", "supporting", "holding", "held_by", "wearing", "worn_by"} <= {e.premise for e in k.entailments}
    assert all(e.why for e in k.entailments)
