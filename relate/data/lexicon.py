"""The synthetic world's predicate lexicon: its concepts and the surface forms it states them with.

The world chooses which relations exist in it and which strings say them: the table below.
Everything else about a concept is read from ``relate/predicate_knowledge.yaml`` through the
synonym group of its forms (a concept is named after its group): its family, its inverse (the
inverse group, when the world has that concept too), whether it is symmetric and whether it
requires touching boxes. Each concept has several surface strings so that open-vocabulary
matching, synonym groups and the text bank have something real to work on.

Families say what decides a concept: ``spatial`` predicates follow from the boxes alone;
``depth`` and ``appearance`` need the pixels (occlusion order, colour); ``contact``,
``proximity`` and ``containment`` are checked by the geometric gate; ``action`` and ``part`` are
semantic relations.

A form of a concept with an inverse is restated by its string-level pair in the knowledge file,
which must be a form of the inverse concept (the scripted annotator relies on it).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

from relate.predicate_knowledge import PredicateKnowledge, PredicateKnowledgeError, load_predicate_knowledge

__all__ = ["Concept", "CONCEPTS", "FAMILIES", "PIXEL_FAMILIES", "BOX_FAMILIES", "LAYOUT_FAMILIES",
           "SURFACE_TO_CONCEPT", "concept_of", "all_surface_forms", "inverse_form"]


@dataclass(frozen=True)
class Concept:
    name: str
    family: str
    forms: tuple[str, ...]
    inverse: str | None = None
    symmetric: bool = False
    contact: bool = False

    @property
    def directional(self) -> bool:
        return not self.symmetric


# The world's own choice: concept (= synonym group) -> the forms its scenes are stated with. The
# order of the forms is part of the world (a scene draws a form by position), so it cannot change
# without changing every corpus.
_WORLD: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("left_of", ("left of", "to the left of", "on the left side of")),
    ("right_of", ("right of", "to the right of", "on the right side of")),
    ("above", ("above", "over", "higher than")),
    ("below", ("below", "beneath", "lower than")),
    ("in_front_of", ("in front of", "occluding", "blocking the view of")),
    ("behind", ("behind", "hidden behind", "partly hidden by")),
    ("brighter_than", ("brighter than", "lighter than", "paler than")),
    ("darker_than", ("darker than", "dimmer than", "deeper in tone than")),
    ("same_colour_as", ("same colour as", "same color as", "matching the colour of")),
    ("on", ("on", "on top of", "resting on", "sitting on")),
    ("touching", ("touching", "against", "in contact with")),
    ("near", ("near", "next to", "close to")),
    ("inside", ("inside", "in", "within")),
    ("contains", ("contains", "enclosing", "holding inside")),
    ("holding", ("holding", "grasping", "carrying")),
    ("wearing", ("wearing", "has on", "dressed in")),
    ("part_of", ("part of", "belongs to", "attached to")),
)


def _concepts(world: tuple[tuple[str, tuple[str, ...]], ...], knowledge: PredicateKnowledge) -> dict[str, Concept]:
    names = {name for name, _ in world}
    out = {}
    for name, forms in world:
        groups = {form: knowledge.group_of(form) for form in forms}
        wrong = {f: (g.name if g else None) for f, g in groups.items() if g is None or g.name != name}
        if wrong:
            raise PredicateKnowledgeError(f"synthetic lexicon: the forms of {name!r} must be forms of group {name!r} in "
                                          f"{knowledge.path}; these are not (form -> group): {wrong}")
        g = knowledge.groups[name]
        out[name] = Concept(name, g.family, forms, g.inverse if g.inverse in names else None, g.symmetric, g.contact)
    for c in out.values():
        for form in c.forms if c.inverse is not None else ():
            partner = knowledge.inverse_form(form)
            if partner not in out[c.inverse].forms:
                raise PredicateKnowledgeError(f"synthetic lexicon: {form!r} ({c.name}) is paired with {partner!r} in "
                                              f"{knowledge.path}, which is not a form of {c.inverse!r}")
    return out


_KNOWLEDGE = load_predicate_knowledge()
CONCEPTS: Mapping[str, Concept] = MappingProxyType(_concepts(_WORLD, _KNOWLEDGE))
SURFACE_TO_CONCEPT: Mapping[str, str] = MappingProxyType({f: c.name for c in CONCEPTS.values() for f in c.forms})
# The world's families in the knowledge file's order, and which of them the boxes, the pixels or
# the annotator's spatial pass decide.
FAMILIES: tuple[str, ...] = tuple(f for f in _KNOWLEDGE.families if any(c.family == f for c in CONCEPTS.values()))
PIXEL_FAMILIES: tuple[str, ...] = tuple(f for f in _KNOWLEDGE.families_decided_by("pixels") if f in FAMILIES)
BOX_FAMILIES: tuple[str, ...] = tuple(f for f in _KNOWLEDGE.families_decided_by("boxes") if f in FAMILIES)
LAYOUT_FAMILIES: tuple[str, ...] = tuple(f for f in FAMILIES if _KNOWLEDGE.families[f].layout)


def concept_of(predicate: str) -> Concept:
    """The concept a surface string belongs to; unknown strings are an error naming the valid ones."""
    try:
        return CONCEPTS[SURFACE_TO_CONCEPT[predicate.strip().lower()]]
    except KeyError:
        raise KeyError(f"{predicate!r} is not a synthetic-world predicate; known: {sorted(SURFACE_TO_CONCEPT)}") from None


def all_surface_forms() -> list[str]:
    return [f for c in CONCEPTS.values() for f in c.forms]


def inverse_form(predicate: str) -> str | None:
    """The surface form restating ``predicate`` from the other endpoint (its string-level inverse
    pair); None when its concept has no inverse in the synthetic world."""
    c = concept_of(predicate)
    if c.inverse is None:
        return None
    return _KNOWLEDGE.inverse_form(predicate)
