"""Judged information, Eq. 4 of seed 001 (§ 6.5, D.8.1): surprisal of the relations a judge accepts.

I = sum over accepted relations r of -log2 p_ref(pred(r)), reported per image. The reference
marginal is the predicate distribution of a training corpus shared by every compared system (so
no system is scored against its own habits), renormalised over the predicates that all compared
systems emit (so no smoothing constant enters the comparison). Accepted relations whose predicate
lies outside that vocabulary are counted and reported as out-of-reference mass; they never add
bits. The axis is divided by the same quantity on the ground-truth relations of the same images,
giving the share of the annotation's information a system delivers (may exceed 1: annotations
are sparse).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Iterable, Mapping, Sequence

__all__ = ["normalise_predicate", "surprisal", "ReferenceMarginal", "build_reference", "shared_vocabulary",
           "InformationSummary", "judged_information"]


def normalise_predicate(predicate: str) -> str:
    """Case and whitespace only: surface strings are never mapped onto canonical forms."""
    return " ".join(str(predicate).lower().split())


def surprisal(p: float) -> float:
    """-log2 p in bits (a predicate with probability 0.2 carries 2.32 bits)."""
    if not 0.0 < p <= 1.0:
        raise ValueError(f"probability must lie in (0, 1], got {p}")
    return -math.log2(p)


@dataclass(frozen=True)
class ReferenceMarginal:
    """p_ref over a restricted vocabulary, plus what the restriction left out of the reference."""

    probs: Mapping[str, float]
    excluded_mass: float          # share of the reference corpus's relations outside the vocabulary
    missing: tuple[str, ...]      # shared predicates the reference never saw (cannot be priced)

    def bits(self, predicate: str) -> float | None:
        """Surprisal of ``predicate``; None when it lies outside the reference."""
        p = self.probs.get(normalise_predicate(predicate))
        return None if p is None else surprisal(p)

    def __contains__(self, predicate: object) -> bool:
        return isinstance(predicate, str) and normalise_predicate(predicate) in self.probs


def shared_vocabulary(emitted: Mapping[str, Iterable[str]]) -> set[str]:
    """Predicates every system emits (normalised); the restriction of Eq. 4's reference."""
    if not emitted:
        raise ValueError("shared_vocabulary needs at least one system")
    sets = [{normalise_predicate(p) for p in preds} for preds in emitted.values()]
    return set.intersection(*sets)


def build_reference(counts: Mapping[str, int], restrict_to: Iterable[str] | None = None) -> ReferenceMarginal:
    """Renormalise reference ``counts`` over ``restrict_to`` (all predicates when None)."""
    merged: Counter = Counter()
    for p, c in counts.items():
        if c < 0:
            raise ValueError(f"reference count of {p!r} is negative ({c})")
        merged[normalise_predicate(p)] += int(c)
    total = sum(merged.values())
    if total <= 0:
        raise ValueError("reference counts are empty: Eq. 4 needs a reference marginal")
    vocab = set(merged) if restrict_to is None else {normalise_predicate(p) for p in restrict_to}
    kept = {p: merged[p] for p in sorted(vocab) if merged.get(p, 0) > 0}
    mass = sum(kept.values())
    if mass == 0:
        raise ValueError(f"none of the {len(vocab)} shared predicates occurs in the reference corpus")
    return ReferenceMarginal(probs={p: c / mass for p, c in kept.items()},
                             excluded_mass=1.0 - mass / total,
                             missing=tuple(sorted(p for p in vocab if p not in kept)))


@dataclass
class InformationSummary:
    """Tab. 7's decomposition for one system (or the annotation) over ``images`` images."""

    images: int
    asserted: int
    accepted: int
    accepted_in_reference: int
    bits: float

    @property
    def accepted_per_image(self) -> float:
        return self.accepted / self.images if self.images else float("nan")

    @property
    def bits_per_accepted(self) -> float:
        # averaged over in-reference acceptances only: out-of-reference ones carry no price
        return self.bits / self.accepted_in_reference if self.accepted_in_reference else float("nan")

    @property
    def bits_per_image(self) -> float:
        return self.bits / self.images if self.images else float("nan")

    @property
    def out_of_reference_share(self) -> float:
        return 1.0 - self.accepted_in_reference / self.accepted if self.accepted else 0.0

    def to_dict(self) -> dict:
        return {**asdict(self), "asserted_per_image": self.asserted / self.images if self.images else float("nan"),
                "accepted_per_image": self.accepted_per_image, "bits_per_accepted": self.bits_per_accepted,
                "bits_per_image": self.bits_per_image, "out_of_reference_share": self.out_of_reference_share}


def judged_information(predicates: Sequence[str], accepted: Sequence[bool | None], reference: ReferenceMarginal,
                       images: int) -> InformationSummary:
    """Eq. 4 summed over ``images`` images; ``accepted`` None (unparseable answer) is not acceptance.

    For the annotation's own information pass every ground-truth predicate with accepted=True.
    """
    if len(predicates) != len(accepted):
        raise ValueError(f"{len(predicates)} predicates but {len(accepted)} verdicts")
    if images < 0:
        raise ValueError(f"images must be >= 0, got {images}")
    n_acc = n_in = 0
    bits = 0.0
    for p, ok in zip(predicates, accepted):
        if ok is not True:
            continue
        n_acc += 1
        b = reference.bits(p)
        if b is not None:
            n_in += 1
            bits += b
    return InformationSummary(images=images, asserted=len(predicates), accepted=n_acc,
                              accepted_in_reference=n_in, bits=bits)
