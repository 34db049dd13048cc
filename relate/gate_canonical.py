"""The canonical map c(.) of Algorithm 1 (App. C.2): surface forms grouped for gating only.

Predicates stay the annotator's own strings in the corpus (App. C.4); this map only tells the
gate which geometric rule, if any, a surface string is subject to. It covers the 21 layout forms
the spatial pass may use (left/right, above/below, front/behind, inside, near and thirteen
contact phrasings) plus the few non-layout groups the semantic-pass rules need (part-of, and
actions that imply contact such as holding or wearing). Anything else is unconstrained: it
passes the geometric rules unchecked and is counted as such.

What is true of a form is not decided here: each canonical form names its synonym group in
``relate/predicate_knowledge.yaml``, and its inverse and whether it requires touching boxes are
read from there, as are the surface strings of the directional and containment forms and every
restatement phrase. This module owns only the gate's grouping: which canonical form a surface
string falls under, its kind and the geometry the gate checks. ``CanonicalMap.extended`` adds
surface forms.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

import numpy as np

from relate.predicate_knowledge import PredicateKnowledgeError, load_predicate_knowledge

__all__ = ["Form", "CanonicalMap", "LAYOUT_FORMS", "KINDS", "normalise_predicate", "default_map", "default_forms",
           "default_surface", "default_surface_inverse"]

# kind codes (small ints so the gate can work on int arrays)
KINDS = ("other", "horizontal", "vertical", "depth", "containment", "proximity", "contact",
         "part", "semantic_contact")
_K = {k: i for i, k in enumerate(KINDS)}
# Only left/right, above/below and front/behind are repaired or restated by swapping the roles
# (Alg. 1 lines 11-13, the balancing of §4.1); every other form with a contradiction is rejected.
_RESTATED_KINDS = ("horizontal", "vertical", "depth")


@dataclass(frozen=True)
class Form:
    """One canonical form: its kind, whether it is one of the 21 layout forms, its geometry."""

    name: str
    kind: str
    layout: bool
    contact: bool = False        # requires touching boxes (Alg. 1 lines 5-6, 18-19)
    axis: int = 0                # 1: x, 2: y; the subject's centre must lie on the ``sign`` side
    sign: int = 0                # -1: subject centre smaller than object's (left/upper)
    inverse: str | None = None   # canonical inverse; None: unrepairable by role swap (line 13)
    part_like: bool = False      # exempt from the body-part rules of the semantic passes (line 15)


@dataclass(frozen=True)
class _Spec:
    """The gate's own part of a form; ``group`` names where its facts are read."""

    name: str
    kind: str
    layout: bool
    group: str
    axis: int = 0
    sign: int = 0
    part_like: bool = False


_SPECS: tuple[_Spec, ...] = (
    _Spec("left of", "horizontal", True, "left_of", axis=1, sign=-1),
    _Spec("right of", "horizontal", True, "right_of", axis=1, sign=1),
    _Spec("above", "vertical", True, "above", axis=2, sign=-1),
    _Spec("below", "vertical", True, "below", axis=2, sign=1),
    _Spec("in front of", "depth", True, "in_front_of"),
    _Spec("behind", "depth", True, "behind"),
    _Spec("inside", "containment", True, "inside"),
    _Spec("near", "proximity", True, "near"),
    # thirteen contact phrasings; "on top of" also asserts the vertical order but has no inverse
    # phrasing, so a contradicting direction is rejected rather than repaired (line 13)
    _Spec("on", "contact", True, "on"),
    _Spec("on top of", "contact", True, "on", axis=2, sign=-1),
    _Spec("resting on", "contact", True, "on"),
    _Spec("sitting on", "contact", True, "on"),
    _Spec("standing on", "contact", True, "standing_on"),
    _Spec("lying on", "contact", True, "lying_on"),
    _Spec("leaning against", "contact", True, "leaning_on"),
    _Spec("hanging from", "contact", True, "hanging_from"),
    # the gate reads "attached to" as fastening (with "fixed to"), not as the part-of sense the
    # text space groups it with, so its facts are those of fixed_to
    _Spec("attached to", "contact", True, "fixed_to", part_like=True),
    _Spec("mounted on", "contact", True, "fixed_to"),
    _Spec("touching", "contact", True, "touching"),
    _Spec("covering", "contact", True, "covering"),
    _Spec("supporting", "contact", True, "supporting"),
    # non-layout groups used by the semantic-pass rules only
    _Spec("part of", "part", False, "part_of", part_like=True),
    _Spec("holding", "semantic_contact", False, "holding"),
    _Spec("wearing", "semantic_contact", False, "wearing"),
    _Spec("riding", "semantic_contact", False, "riding"),
)
LAYOUT_FORMS: tuple[str, ...] = tuple(s.name for s in _SPECS if s.layout)
assert len(LAYOUT_FORMS) == 21, LAYOUT_FORMS

# Forms whose surface strings are exactly their group's forms, so that a restated relation
# (whose phrase is a form of the inverse group) stays gated. "inside" also takes its inverse
# group's forms ("contains") with the roles read the other way round.
_SURFACES_FROM_GROUP = ("left of", "right of", "above", "below", "in front of", "behind", "inside")
_REVERSED_FROM_INVERSE_GROUP = ("inside",)

# surface form -> (canonical form, roles reversed) for the other forms: the gate's own choice of
# which phrasings it holds to each form's rule (App. C.2), narrower than the synonym groups.
_OWN: dict[str, tuple[str, bool]] = {}


def _add(canonical: str, forms: str, reverse: bool = False) -> None:
    for s in forms.split("|"):
        if s in _OWN:
            raise ValueError(f"canonical map: {s!r} listed twice ({_OWN[s][0]!r} and {canonical!r})")
        _OWN[s] = (canonical, reverse)


_add("near", "near|next to|close to|beside|by|near to|adjacent to|alongside|nearby|close by")
_add("on", "on")
_add("on top of", "on top of|atop")
_add("resting on", "resting on|rests on|placed on|lying atop")
_add("sitting on", "sitting on|seated on|sits on")
_add("standing on", "standing on|stands on")
_add("lying on", "lying on|laying on|lies on")
_add("leaning against", "leaning against|leaning on|propped against")
_add("hanging from", "hanging from|hanging on|suspended from|dangling from")
_add("attached to", "attached to|fixed to|fastened to")
_add("mounted on", "mounted on|installed on")
_add("touching", "touching|against|in contact with|pressed against")
_add("covering", "covering|covers|draped over")
_add("supporting", "supporting|holding up|propping up")
_add("part of", "part of|belongs to|a part of|belonging to")
_add("holding", "holding|grasping|carrying|gripping|holds|carries")
_add("wearing", "wearing|has on|dressed in|wears")
_add("riding", "riding|riding on|rides")


@functools.lru_cache(maxsize=1)
def default_forms() -> tuple[Form, ...]:
    """The canonical forms, with contact and inverse taken from the predicate knowledge file."""
    knowledge = load_predicate_knowledge()
    missing = sorted({s.group for s in _SPECS} - set(knowledge.groups))
    if missing:
        raise PredicateKnowledgeError(f"canonical map: groups {missing} are not in {knowledge.path}")
    restated = {s.group: s.name for s in _SPECS if s.kind in _RESTATED_KINDS}
    out = []
    for s in _SPECS:
        group = knowledge.groups[s.group]
        inverse = None
        if s.kind in _RESTATED_KINDS:
            inverse = restated.get(group.inverse)
            if inverse is None:
                raise PredicateKnowledgeError(f"canonical map: {s.name!r} is restated by swapping the roles, but its "
                                              f"group {s.group!r} has inverse {group.inverse!r} in {knowledge.path}, "
                                              "which no restated form covers")
        out.append(Form(s.name, s.kind, s.layout, contact=group.contact, axis=s.axis, sign=s.sign, inverse=inverse,
                        part_like=s.part_like))
    return tuple(out)


@functools.lru_cache(maxsize=1)
def default_surface() -> Mapping[str, tuple[str, bool]]:
    """Every surface string the default map knows -> (canonical form, roles reversed)."""
    groups = load_predicate_knowledge().groups
    own_group = {s.name: s.group for s in _SPECS}
    out: dict[str, tuple[str, bool]] = {}
    for canonical in _SURFACES_FROM_GROUP:
        for s in groups[own_group[canonical]].forms:
            out[s] = (canonical, False)
        if canonical in _REVERSED_FROM_INVERSE_GROUP:
            for s in groups[groups[own_group[canonical]].inverse].forms:
                out[s] = (canonical, True)
    clash = sorted(s for s in out if s in _OWN)
    if clash:
        raise ValueError(f"canonical map: {clash} are both synonym-group forms and gate-only forms")
    return MappingProxyType({**out, **_OWN})


@functools.lru_cache(maxsize=1)
def default_surface_inverse() -> Mapping[str, str]:
    """Restatement phrase of every surface string the text resources know an inverse for.

    Only the left/right, above/below and front/behind forms are ever restated (§4.1); their
    phrases must be surface forms of the canonical inverse, so a restated relation stays gated.
    """
    from relate.text.resources import restatement_of

    surface = default_surface()
    forms = {f.name: f for f in default_forms()}
    out = {}
    for s, (c, rev) in surface.items():
        r = restatement_of(s)
        restated = forms[c].inverse is not None and not rev
        if restated and (r is None or surface.get(r) != (forms[c].inverse, False)):
            raise ValueError(f"canonical map: {s!r} ({c}) is restated as {r!r}, which is not a surface form of "
                             f"{forms[c].inverse!r}; fix the inverse_pairs of {load_predicate_knowledge().path}")
        if r is not None:
            out[s] = r
    return MappingProxyType(out)


_WS = re.compile(r"\s+")
_LEAD = re.compile(r"^(?:is|are|be|being)\s+")


def normalise_predicate(p: str) -> str:
    """Lower-case, single spaces, no trailing punctuation or leading copula ("is on" -> "on")."""
    s = _WS.sub(" ", str(p).strip().lower()).strip(" .,;:!\"'")
    return _LEAD.sub("", s)


@dataclass
class CanonicalMap:
    """Surface strings -> canonical form ids, with per-form geometry as int arrays for the gate."""

    forms: tuple[Form, ...] = field(default_factory=default_forms)
    surface: Mapping[str, tuple[str, bool]] = field(default_factory=lambda: dict(default_surface()))
    surface_inverse: Mapping[str, str] = field(default_factory=lambda: dict(default_surface_inverse()))

    def __post_init__(self) -> None:
        names = [f.name for f in self.forms]
        self.index = {n: i for i, n in enumerate(names)}
        bad = sorted({c for c, _ in self.surface.values() if c not in self.index})
        if bad:
            raise ValueError(f"canonical map: unknown canonical form(s) {bad}; valid: {names}")
        self.surface_inverse = dict(self.surface_inverse)
        f = self.forms
        self.kind = np.array([_K[x.kind] for x in f], dtype=np.int8)
        self.layout = np.array([x.layout for x in f], dtype=bool)
        self.contact = np.array([x.contact for x in f], dtype=bool)
        self.axis = np.array([x.axis for x in f], dtype=np.int8)
        self.sign = np.array([x.sign for x in f], dtype=np.int8)
        self.has_inverse = np.array([x.inverse is not None for x in f], dtype=bool)
        self.part_like = np.array([x.part_like for x in f], dtype=bool)

    def lookup(self, predicate: str) -> tuple[int, bool]:
        """(canonical id or -1 when unconstrained, roles reversed for the check)."""
        hit = self.surface.get(normalise_predicate(predicate))
        return (-1, False) if hit is None else (self.index[hit[0]], hit[1])

    def inverse_surface(self, predicate: str) -> str | None:
        """The phrase stating the relation from the other endpoint (``relate.text.resources.
        restatement_of`` for known strings; the canonical inverse for strings added by
        :meth:`extended`). Balancing restates only forms with a canonical inverse."""
        norm = normalise_predicate(predicate)
        if norm in self.surface_inverse:
            return self.surface_inverse[norm]
        cid, rev = self.lookup(norm)
        if cid < 0 or rev or self.forms[cid].inverse is None:
            return None
        return self.forms[cid].inverse

    def extended(self, extra: Mapping[str, str]) -> "CanonicalMap":
        """A copy with more surface forms (``{"perched on": "on"}``); unknown targets are an error."""
        surface = dict(self.surface)
        for s, c in extra.items():
            surface[normalise_predicate(s)] = (c, False)
        return CanonicalMap(self.forms, surface, dict(self.surface_inverse))


_DEFAULT: CanonicalMap | None = None


def default_map() -> CanonicalMap:
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = CanonicalMap()
    return _DEFAULT
