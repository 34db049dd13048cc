"""Chance correction and the OVS composite (seed 001, 5.4 "Composite", D.2 Tab. 21).

Each axis is first mapped onto [0, 1] above its own floor: norm = clip((x - chance) / (1 -
chance), 0, 1), with chance 1/V for recall over a V-predicate benchmark, the positive prevalence
for fAP and 0.5 for AUC. Two axes are divided by a measured quantity instead: A4 by the shared
detector's pair-recall ceiling and A5 by the information in the images' own annotation. OVS is
the harmonic mean over A1, A2, A4, A5 and A6 (A5 only when present), which imbalance drags down;
it is printed with the arithmetic mean, the weakest axis and balance = OVS / arithmetic, and is
comparable only between systems scored on the same axis set.

What this reproduces of the paper, and what not (tests/unit/test_metrics_composite.py). Fed the
published cells, these functions match Tab. 21's A4-withheld row for both systems (OvSGTR 22.9,
RelateAnything 45.4 against 45.3, inside the cells' rounding). Every value that keeps A4 does not
match. Dividing wR@50 by the 0.696 ceiling, as Tab. 3 says, puts A4 at 0.057 for OvSGTR and its
OVS at 14.3 where Tab. 3 and 21 print 11.8; for RelateAnything A4 is 0.287 and OVS 40.7 where they
print 40.1. Tab. 21's six rows fit OvSGTR only if its A4 is the undivided wR@50, 0.040, and fit
RelateAnything only if its A4 lies near 0.27, neither raw (0.200) nor the ratio. This module keeps
Tab. 3's rule and does not fit the table.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Mapping, Sequence

import numpy as np

__all__ = ["COMPOSITE_AXES", "chance_correct", "recall_chance", "ratio_to_reference",
           "harmonic_mean", "Composite", "composite", "leave_one_axis_out"]

COMPOSITE_AXES = ("A1", "A2", "A4", "A5", "A6")


def chance_correct(x: float, chance: float) -> float:
    if not 0.0 <= chance < 1.0:
        raise ValueError(f"chance level must lie in [0, 1), got {chance}")
    return float(np.clip((x - chance) / (1.0 - chance), 0.0, 1.0))


def recall_chance(vocabulary_size: int) -> float:
    if vocabulary_size < 1:
        raise ValueError(f"vocabulary size must be positive, got {vocabulary_size}")
    return 1.0 / vocabulary_size


def ratio_to_reference(x: float, reference: float) -> float:
    """Share of what is recoverable (A4 / pair-recall ceiling, A5 / annotation bits), clipped."""
    if not reference > 0:
        raise ValueError(f"reference must be positive, got {reference}")
    return float(np.clip(x / reference, 0.0, 1.0))


def harmonic_mean(values: Sequence[float]) -> float:
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        return float("nan")
    if (v <= 0).any():
        return 0.0
    return float(v.size / (1.0 / v).sum())


@dataclass
class Composite:
    axes: dict[str, float]
    axis_set: list[str]
    ovs: float
    arithmetic: float
    weakest_axis: str
    weakest_value: float
    balance: float
    leave_one_out: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def _present(axes: Mapping[str, float | None], include: Sequence[str]) -> dict[str, float]:
    return {a: float(axes[a]) for a in include if axes.get(a) is not None and np.isfinite(axes[a])}


def composite(axes: Mapping[str, float | None], include: Sequence[str] = COMPOSITE_AXES) -> Composite:
    """OVS over the chance-corrected axes in ``include`` that are present (A5 is optional)."""
    got = _present(axes, include)
    if not got:
        raise ValueError(f"no axis of {list(include)} is present; have {sorted(axes)}")
    bad = {a: v for a, v in got.items() if not 0.0 <= v <= 1.0}
    if bad:
        raise ValueError(f"axes must be chance-corrected into [0, 1] first: {bad}")
    vals = list(got.values())
    ovs, arith = harmonic_mean(vals), float(np.mean(vals))
    weakest = min(got, key=got.get)
    loo = {a: harmonic_mean([v for b, v in got.items() if b != a]) for a in got} if len(got) > 1 else {}
    return Composite(got, list(got), ovs, arith, weakest, got[weakest],
                     ovs / arith if arith > 0 else 0.0, loo)


def leave_one_axis_out(systems: Mapping[str, Mapping[str, float | None]],
                       include: Sequence[str] = COMPOSITE_AXES) -> list[dict]:
    """Tab. 21: OVS per system with each axis withheld in turn (rows: 'none' then each axis)."""
    comps = {name: composite(ax, include) for name, ax in systems.items()}
    axes = [a for a in include if all(a in c.axes for c in comps.values())]
    rows = [{"withheld": "none", **{n: c.ovs for n, c in comps.items()}}]
    for a in axes:
        rows.append({"withheld": a, **{n: c.leave_one_out.get(a, float("nan")) for n, c in comps.items()}})
    return rows
