"""The canonical map c(.) of Algorithm 1 (App. C.2): surface forms grouped for gating only.

Predicates stay the annotator's own strings in the corpus (App. C.4); this map only tells the
gate which geometric rule, if any, a surface string is subject to. It covers the 21 layout forms
the spatial pass may use (left/right, above/below, front/behind, inside, near and thirteen
contact phrasings) plus the few non-layout groups the semantic-pass rules need (part-of, and
actions that imply contact such as holding or wearing). Anything else is unconstrained: it
passes the geometric rules unchecked and is counted as such.

The table below is written for this project; ``CanonicalMap.extended`` adds surface forms.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

__all__ = ["Form", "CanonicalMap", "LAYOUT_FORMS", "KINDS", "normalise_predicate", "default_map"]

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

# surface form -> (canonical form, roles reversed for the check). "contains" reduces to "inside"
# with the roles read the other way round.
_SURFACE: dict[str, tuple[str, bool]] = {}


def _add(canonical: str, forms: str, reverse: bool = False) -> None:
    for s in forms.split("|"):
        _SURFACE[s] = (canonical, reverse)


_add("left of", "left of|to the left of|on the left of|on the left side of|at the left of|leftward of")
_add("right of", "right of|to the right of|on the right of|on the right side of|at the right of|rightward of")
_add("above", "above|over|higher than|up from|located above")
_add("below", "below|beneath|under|underneath|lower than|located below")
_add("in front of", "in front of|occluding|blocking the view of|before|closer to the camera than|"
     "partially covering|in the foreground of")
_add("behind", "behind|hidden behind|partly hidden by|in back of|occluded by|farther than|"
     "partially hidden by|in the background of")
_add("inside", "inside|in|within|inside of|contained in|enclosed in|enclosed by")
_add("inside", "contains|containing|enclosing|holding inside|has inside", reverse=True)
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

# surface inverses used when a relation is restated from the other endpoint (§4.1)
_SURFACE_INVERSE_PAIRS = (
    ("left of", "right of"), ("to the left of", "to the right of"), ("on the left of", "on the right of"),
    ("on the left side of", "on the right side of"), ("at the left of", "at the right of"),
    ("leftward of", "rightward of"),
    ("above", "below"), ("over", "beneath"), ("higher than", "lower than"), ("up from", "under"),
    ("located above", "located below"),
    ("in front of", "behind"), ("occluding", "hidden behind"), ("blocking the view of", "partly hidden by"),
    ("in the foreground of", "in the background of"), ("partially covering", "partially hidden by"),
    ("before", "in back of"), ("closer to the camera than", "farther than"),
)

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
    surface: Mapping[str, tuple[str, bool]] = field(default_factory=lambda: dict(_SURFACE))
    surface_inverse: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        names = [f.name for f in self.forms]
        self.index = {n: i for i, n in enumerate(names)}
        bad = sorted({c for c, _ in self.surface.values() if c not in self.index})
        if bad:
            raise ValueError(f"canonical map: unknown canonical form(s) {bad}; valid: {names}")
        inv = dict(self.surface_inverse)
        for a, b in _SURFACE_INVERSE_PAIRS:
            inv.setdefault(a, b)
            inv.setdefault(b, a)
        self.surface_inverse = inv
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
        """The inverse phrasing used when restating; keeps the annotator's style where known."""
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
