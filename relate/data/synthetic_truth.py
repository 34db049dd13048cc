"""What is true in a synthetic scene: the world's pair rules, and the full relation set they imply.

The world states a few relations per scene (``relate.data.synthetic``), but many more hold. The
rules that decide a derived relation are written once here and used twice: by the world when it
chooses what to state, and by :func:`true_relations`, which applies the same rules to every pair
of whole objects to give the full truth. That truth is what makes the corpus positive-unlabeled in
a measurable way (seed 001, § 3.3): a pair stated ``left of`` is often also, unstated, ``near``;
an item stated ``on`` a table is also ``touching`` it.

Nothing here is invented beyond the world's own rules:

* spatial, proximity and depth: the rules of ``_Builder.derived`` (box separation on the dominant
  axis; a gap under half the larger diagonal; visibly overlapping drawn shapes, ordered by z);
* appearance: the luminance gap and colour identity ``_Builder._appearance`` uses;
* contact implied by construction: ``on``, ``holding`` and ``wearing`` are contact relations
  (``contact: true`` in ``relate/predicate_knowledge.yaml``), so their pair is also ``touching``
  where the boxes meet, which the world's construction guarantees;
* containment, part and the constructed contact/action relations: exactly as built.

Body parts take part only in the relations built for them (``part_of``).
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import numpy as np

from relate import geometry as G
from relate.data.lexicon import CONCEPTS

__all__ = ["PairRules", "true_relations", "close_relations", "IMPLIED_CONTACT", "BRIGHTNESS_GAP",
           "MIN_OCCLUSION_PX", "MIN_OCCLUSION_SHARE"]

# A depth pair needs this much shared drawn area: at least this many pixels and this share of the
# smaller shape (below it the occluded part is a sliver no viewer could judge).
MIN_OCCLUSION_PX = 24
MIN_OCCLUSION_SHARE = 0.15
# Largest cover of one box by the other that still reads as occlusion rather than containment.
_MAX_OCCLUSION_COVER = 0.9
# Least luminance difference (0-255 scale) for brighter/darker to be a readable relation.
BRIGHTNESS_GAP = 80
# Concepts whose pair is, by construction, in contact: stated or not, it is also ``touching``,
# the world's concept that states contact itself.
IMPLIED_CONTACT: Mapping[str, str] = {c.name: "touching" for c in CONCEPTS.values()
                                       if c.contact and c.name != "touching"}


class PairRules:
    """The world's pairwise rules over whole objects; ``a``/``b`` index ``boxes`` and ``masks``."""

    def __init__(self, boxes: np.ndarray, masks: Sequence[np.ndarray]) -> None:
        self.boxes = boxes
        self.masks = list(masks)
        self.inter = G.intersection_area(boxes[:, None], boxes[None])
        self.cover = self.inter / np.maximum(G.area(boxes)[:, None], 1e-6)
        self.ctr = G.centres(boxes)
        self.gaps = G.gap(boxes[:, None], boxes[None])
        self.diags = G.diag(boxes)
        self._gx, self._gy = G._axis_gaps(boxes[:, None], boxes[None])
        self._d = self.ctr[None] - self.ctr[:, None]  # [a, b]: centre of b minus centre of a
        self._fill = [int(m.sum()) for m in self.masks]

    def __len__(self) -> int:
        return len(self.boxes)

    def occlusion_visible(self, a: int, b: int) -> bool:
        """Depth is readable: the drawn shapes overlap enough to see who hides whom, and neither box
        all but covers the other (that reads as containment)."""
        if self.inter[a, b] <= 0:
            return False
        shared = int(np.count_nonzero(self.masks[a] & self.masks[b]))
        visible = shared >= max(MIN_OCCLUSION_PX, MIN_OCCLUSION_SHARE * min(self._fill[a], self._fill[b]))
        return bool(visible and max(self.cover[a, b], self.cover[b, a]) < _MAX_OCCLUSION_COVER)

    def spatial(self, a: int, b: int) -> str | None:
        """The spatial concept of ``a`` relative to ``b``: separated on x with x dominant gives
        left/right, otherwise separated on y gives above/below; None when neither holds."""
        gx, gy = self._gx[a, b], self._gy[a, b]
        dx, dy = self._d[a, b]
        if gx > 0 and abs(dx) >= abs(dy):
            return "left_of" if dx > 0 else "right_of"
        if gy > 0:
            return "above" if dy > 0 else "below"
        return None

    def near(self, a: int, b: int) -> bool:
        """Apart but close: a positive gap under half the larger diagonal (the gate's proximity)."""
        return bool(0 < self.gaps[a, b] < 0.5 * max(self.diags[a], self.diags[b]))


def close_relations(triples: Iterable[tuple[int, int, str]]) -> set[tuple[int, int, str]]:
    """Each relation together with its statement from the other end (inverse or symmetric)."""
    out: set[tuple[int, int, str]] = set()
    for s, o, c in triples:
        out.add((s, o, c))
        concept = CONCEPTS[c]
        if concept.inverse is not None:
            out.add((o, s, concept.inverse))
        elif concept.symmetric:
            out.add((o, s, c))
    return out


def _derived(rules: PairRules, whole: Sequence[int], z: Sequence[float], colours: Sequence[str],
             luminance: Mapping[str, float]) -> list[tuple[int, int, str]]:
    """Every spatial, proximity, depth and appearance relation the world's rules make true."""
    out = []
    for a in range(len(whole)):
        for b in range(a + 1, len(whole)):
            i, j = whole[a], whole[b]
            spatial = rules.spatial(a, b)
            if spatial is not None:
                out.append((i, j, spatial))
            if rules.near(a, b):
                out.append((i, j, "near"))
            if rules.occlusion_visible(a, b):
                out.append((i, j, "in_front_of") if z[i] > z[j] else (j, i, "in_front_of"))
            ci, cj = colours[i], colours[j]
            if ci in luminance and cj in luminance:
                if ci == cj:
                    out.append((i, j, "same_colour_as"))
                elif abs(luminance[ci] - luminance[cj]) > BRIGHTNESS_GAP:
                    out.append((i, j, "brighter_than") if luminance[ci] > luminance[cj] else (j, i, "brighter_than"))
    return out


def true_relations(rules: PairRules | None, whole: Sequence[int], boxes: np.ndarray, z: Sequence[float],
                   colours: Sequence[str], luminance: Mapping[str, float],
                   built: Iterable[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """The full truth of a scene, closed under inverses and symmetry, sorted.

    ``rules`` covers the whole objects ``whole`` (None when there are fewer than two); ``boxes``,
    ``z`` and ``colours`` cover every object; ``built`` is every relation the world recorded while
    building (true by construction, whatever it later chose to state).
    """
    built = list(built)
    implied = [(s, o, IMPLIED_CONTACT[c]) for s, o, c in built
               if c in IMPLIED_CONTACT and G.gap(boxes[s], boxes[o]) <= 0]
    derived = _derived(rules, whole, z, colours, luminance) if rules is not None else []
    return sorted(close_relations(built + implied + derived))
