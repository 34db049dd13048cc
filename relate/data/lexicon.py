"""The synthetic world's predicate lexicon: concepts, their surface forms, families, inverses.

Each concept has several surface strings (synonyms) so that open-vocabulary matching, synonym
groups and the text bank all have something real to work on. Families say what decides a
concept: ``spatial`` predicates follow from the boxes alone; ``depth`` and ``appearance`` need
the pixels (occlusion order, colour); ``contact``, ``proximity`` and ``containment`` are checked
by the geometric gate; ``action`` and ``part`` are semantic relations.

The forms of a concept with an inverse are listed in the order of their string-level inverses:
``forms[k]`` of one side restates ``forms[k]`` of the other (the scripted annotator relies on it).
Those pairs are not a second source of inverse knowledge: they must equal
``relate/text/data/inverse_pairs.tsv`` (checked by tests/unit/test_predicate_knowledge.py); the
order cannot change without changing the synthetic world.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

__all__ = ["Concept", "CONCEPTS", "FAMILIES", "PIXEL_FAMILIES", "SURFACE_TO_CONCEPT", "concept_of", "all_surface_forms",
           "inverse_form"]


@dataclass(frozen=True)
class Concept:
    name: str
    family: str
    forms: tuple[str, ...]
    inverse: str | None = None
    symmetric: bool = False

    @property
    def directional(self) -> bool:
        return not self.symmetric


_C = [
    Concept("left_of", "spatial", ("left of", "to the left of", "on the left side of"), inverse="right_of"),
    Concept("right_of", "spatial", ("right of", "to the right of", "on the right side of"), inverse="left_of"),
    Concept("above", "spatial", ("above", "over", "higher than"), inverse="below"),
    Concept("below", "spatial", ("below", "beneath", "lower than"), inverse="above"),
    Concept("in_front_of", "depth", ("in front of", "occluding", "blocking the view of"), inverse="behind"),
    Concept("behind", "depth", ("behind", "hidden behind", "partly hidden by"), inverse="in_front_of"),
    Concept("brighter_than", "appearance", ("brighter than", "lighter than", "paler than"), inverse="darker_than"),
    Concept("darker_than", "appearance", ("darker than", "dimmer than", "deeper in tone than"), inverse="brighter_than"),
    Concept("same_colour_as", "appearance", ("same colour as", "same color as", "matching the colour of"), symmetric=True),
    Concept("on", "contact", ("on", "on top of", "resting on", "sitting on")),
    Concept("touching", "contact", ("touching", "against", "in contact with"), symmetric=True),
    Concept("near", "proximity", ("near", "next to", "close to"), symmetric=True),
    Concept("inside", "containment", ("inside", "in", "within"), inverse="contains"),
    Concept("contains", "containment", ("contains", "enclosing", "holding inside"), inverse="inside"),
    Concept("holding", "action", ("holding", "grasping", "carrying")),
    Concept("wearing", "action", ("wearing", "has on", "dressed in")),
    Concept("part_of", "part", ("part of", "belongs to", "attached to")),
]

CONCEPTS: Mapping[str, Concept] = MappingProxyType({c.name: c for c in _C})
FAMILIES: tuple[str, ...] = ("spatial", "depth", "appearance", "contact", "proximity", "containment", "action", "part")
PIXEL_FAMILIES: tuple[str, ...] = ("depth", "appearance")
SURFACE_TO_CONCEPT: Mapping[str, str] = MappingProxyType({f: c.name for c in _C for f in c.forms})

assert len(SURFACE_TO_CONCEPT) == sum(len(c.forms) for c in _C), "a surface form is used by two concepts"
for _c in _C:
    assert _c.inverse is None or CONCEPTS[_c.inverse].inverse == _c.name, _c.name


def concept_of(predicate: str) -> Concept:
    """The concept a surface string belongs to; unknown strings are an error naming the valid ones."""
    try:
        return CONCEPTS[SURFACE_TO_CONCEPT[predicate.strip().lower()]]
    except KeyError:
        raise KeyError(f"{predicate!r} is not a synthetic-world predicate; known: {sorted(SURFACE_TO_CONCEPT)}") from None


def all_surface_forms() -> list[str]:
    return [f for c in _C for f in c.forms]


def inverse_form(predicate: str) -> str | None:
    """The surface form restating ``predicate`` from the other endpoint (same position in the
    inverse concept's forms); None when its concept has no inverse in the synthetic world."""
    c = concept_of(predicate)
    if c.inverse is None:
        return None
    return CONCEPTS[c.inverse].forms[c.forms.index(predicate.strip().lower())]
