"""The canonical map c(.) of Algorithm 1 (App. C.2): surface forms grouped for gating only.

Predicates stay the annotator's own strings in the corpus (App. C.4); this map only tells the
gate which geometric rule, if any, a surface string is subject to. It covers the 21 layout forms
the spatial pass may use (left/right, above/below, front/behind, inside, near and thirteen
contact phrasings) plus the few non-layout groups the semantic-pass rules need (part-of, and
actions that imply contact such as holding or wearing). Anything else is unconstrained: it
passes the geometric rules unchecked and is counted as such.

Inverse knowledge has one home, ``relate/text/data`` (synonym groups and inverse pairs): the
surface strings of the directional and containment forms and every restatement phrase are read
from there. The contact, proximity and semantic-contact phrasings below are the gate's own;
``CanonicalMap.extended`` adds surface forms.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

import numpy as np

__all__ = ["Form", "CanonicalMap", "LAYOUT_FORMS", "KINDS", "normalise_predicate", "default_map", "default_surface",
           "default_surface_inverse"]

# kind codes (small ints so the gate can work on int arrays)
KINDS = ("other", "horizontal", "vertical", "depth", "containment", "proximity", "contact",
         "part", "semantic_contact")
_K = {k: i for i, k in enumerate(KINDS)}


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


_FORMS: tuple[Form, ...] = (
    Form("left of", "horizontal", True, axis=1, sign=-1, inverse="right of"),
    Form("right of", "horizontal", True, axis=1, sign=1, inverse="left of"),
    Form("above", "vertical", True, axis=2, sign=-1, inverse="below"),
    Form("below", "vertical", True, axis=2, sign=1, inverse="above"),
    Form("in front of", "depth", True, inverse="behind"),
    Form("behind", "depth", True, inverse="in front of"),
    Form("inside", "containment", True),
    Form("near", "proximity", True),
    # thirteen contact phrasings; "on top of" also asserts the vertical order but has no inverse
    # phrasing, so a contradicting direction is rejected rather than repaired (line 13)
    Form("on", "contact", True, contact=True),
    Form("on top of", "contact", True, contact=True, axis=2, sign=-1),
    Form("resting on", "contact", True, contact=True),
    Form("sitting on", "contact", True, contact=True),
    Form("standing on", "contact", True, contact=True),
    Form("lying on", "contact", True, contact=True),
    Form("leaning against", "contact", True, contact=True),
    Form("hanging from", "contact", True, contact=True),
    Form("attached to", "contact", True, contact=True, part_like=True),
    Form("mounted on", "contact", True, contact=True),
    Form("touching", "contact", True, contact=True),
    Form("covering", "contact", True, contact=True),
    Form("supporting", "contact", True, contact=True),
    # non-layout groups used by the semantic-pass rules only
    Form("part of", "part", False, part_like=True),
    Form("holding", "semantic_contact", False, contact=True),
    Form("wearing", "semantic_contact", False, contact=True),
    Form("riding", "semantic_contact", False, contact=True),
)
LAYOUT_FORMS: tuple[str, ...] = tuple(f.name for f in _FORMS if f.layout)
assert len(LAYOUT_FORMS) == 21, LAYOUT_FORMS

# Directional and containment forms take their surface strings from the project's synonym
# groups (relate/text/data/synonym_groups.yaml), and their restatement phrases from its inverse
# pairs, so the gate, the text space and the synthetic lexicon cannot disagree on an inverse.
# canonical form -> (synonym group, roles reversed for the check). "contains" reduces to "inside"
# with the roles read the other way round.
_FROM_GROUPS: tuple[tuple[str, str, bool], ...] = (
    ("left of", "left_of", False), ("right of", "right_of", False), ("above", "above", False),
    ("below", "below", False), ("in front of", "in_front_of", False), ("behind", "behind", False),
    ("inside", "inside", False), ("inside", "contains", True),
)

# surface form -> (canonical form, roles reversed) for the forms that no inverse concerns: the
# gate alone decides which phrasings imply contact or proximity.
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
def default_surface() -> Mapping[str, tuple[str, bool]]:
    """Every surface string the default map knows -> (canonical form, roles reversed)."""
    from relate.text.resources import load_synonym_groups

    groups = load_synonym_groups()
    out: dict[str, tuple[str, bool]] = {}
    for canonical, group, reverse in _FROM_GROUPS:
        for s in groups[group].forms:
            out[s] = (canonical, reverse)
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
    forms = {f.name: f for f in _FORMS}
    out = {}
    for s, (c, rev) in surface.items():
        r = restatement_of(s)
        restated = forms[c].inverse is not None and not rev
        if restated and (r is None or surface.get(r) != (forms[c].inverse, False)):
            raise ValueError(f"canonical map: {s!r} ({c}) is restated as {r!r}, which is not a surface form of "
                             f"{forms[c].inverse!r}; fix relate/text/data/inverse_pairs.tsv")
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

    forms: tuple[Form, ...] = _FORMS
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
