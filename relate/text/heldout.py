"""Held-out inverse pairs at the level of synonym groups, and the check that they stay held out.

Holding out the string pair ("above", "below") proves little while "over" / "under", "far
above" or "positioned below" still train: the student learns the group, not the string. The
split here therefore draws whole pairs of inverse *groups* (seed 001, B.2; Table 16 re-measured
on unseen groups). A string is held out when its base form (modifiers stripped: "standing far
above" -> "above") belongs to a held-out group, which covers every surface form, every modified
form and every derived inverse pair built on them. ``heldout_leaks`` is the proof obligation:
it lists every training row or loss-term index that reaches a held-out string.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from relate.predicate_knowledge import load_inverse_pairs, load_synonym_groups
from relate.text.resources import base_form, group_of, load_modifiers, normalise_predicate

__all__ = ["GroupSplit", "inverse_group_pairs", "split_inverse_groups", "heldout_leaks", "assert_no_heldout_leak",
           "LOSS_PAIR_KEYS"]

# Every [P, 2] row-index array of the distillation data that feeds a loss term.
LOSS_PAIR_KEYS = ("synonym", "synonym_base", "inverse_train", "inverse_train_base", "modified")


def inverse_group_pairs() -> list[tuple[str, str]]:
    """Each declared pair of inverse groups once, as (a, b) with a < b, sorted (file-order free)."""
    groups = load_synonym_groups()
    return sorted((name, g.inverse) for name, g in groups.items() if g.inverse is not None and name < g.inverse)


@dataclass(frozen=True)
class GroupSplit:
    """Trained and held-out pairs of inverse groups; the held-out ones reach no loss term."""

    trained: tuple[tuple[str, str], ...]
    heldout: tuple[tuple[str, str], ...]

    @property
    def heldout_groups(self) -> frozenset[str]:
        return frozenset(g for pair in self.heldout for g in pair)

    def is_heldout(self, string: str) -> bool:
        """True for every surface, modified or derived form whose base lies in a held-out group,
        and for any string that reads as modifier words before a held-out form: "standing on" is
        a group of its own, but it is "on" with a posture word and would teach "on" by the back door."""
        s = normalise_predicate(string)
        base = base_form(s)
        if base is not None and group_of(base) in self.heldout_groups:
            return True
        forms, words = _heldout_forms(self.heldout), _modifier_vocabulary()
        toks = s.split()
        return any(" ".join(toks[i:]) in forms and set(toks[:i]) <= words for i in range(1, len(toks)))

    def inverse_pairs(self, which: str) -> list[tuple[str, str]]:
        """String-level inverse pairs of the ``"trained"`` or ``"heldout"`` groups, in file order."""
        if which not in ("trained", "heldout"):
            raise ValueError(f"GroupSplit.inverse_pairs: which must be 'trained' or 'heldout', got {which!r}")
        held = self.heldout_groups
        return [p for p in load_inverse_pairs() if (group_of(p[0]) in held) == (which == "heldout")]

    def synonym_groups(self, which: str) -> dict[str, list[str]]:
        """Group name -> forms on one side: the held-out groups, or every other group (trained)."""
        if which not in ("trained", "heldout"):
            raise ValueError(f"GroupSplit.synonym_groups: which must be 'trained' or 'heldout', got {which!r}")
        held = self.heldout_groups
        if which == "heldout":
            return {n: list(g.forms) for n, g in load_synonym_groups().items() if n in held}
        # Trained groups lose any form the held-out side claims ("standing on" when "on" is held out).
        return {n: [f for f in g.forms if not self.is_heldout(f)] for n, g in load_synonym_groups().items()
                if n not in held}

    def to_json(self) -> dict:
        return {"trained_groups": [list(p) for p in self.trained], "heldout_groups": [list(p) for p in self.heldout]}


@functools.lru_cache(maxsize=16)
def _heldout_forms(heldout: tuple[tuple[str, str], ...]) -> frozenset[str]:
    groups = load_synonym_groups()
    return frozenset(f for pair in heldout for g in pair for f in groups[g].forms)


@functools.lru_cache(maxsize=1)
def _modifier_vocabulary() -> frozenset[str]:
    mods = load_modifiers()
    return frozenset(w for m in mods.degree + mods.posture for w in m.split())


def split_inverse_groups(heldout_fraction: float, seed: int,
                         heldout: Sequence[str] | None = None) -> GroupSplit:
    """Deterministic split of the inverse group pairs.

    ``heldout`` names groups to hold out explicitly (a group takes its inverse with it);
    otherwise ``round(heldout_fraction * n_pairs)`` pairs are drawn with ``seed``.
    """
    pairs = inverse_group_pairs()
    if heldout is not None:
        groups = load_synonym_groups()
        unknown = sorted(set(heldout) - {g for p in pairs for g in p})
        if unknown:
            raise ValueError(f"heldout groups {unknown} are not groups with a declared inverse; valid: "
                             f"{sorted(g for p in pairs for g in p)}")
        names = set(heldout) | {groups[g].inverse for g in heldout}
        held_idx = {i for i, p in enumerate(pairs) if p[0] in names}
        if len(held_idx) == len(pairs):
            raise ValueError("heldout groups cover every inverse pair; keep at least one pair for training")
    else:
        if not 0.0 <= heldout_fraction < 1.0:
            raise ValueError(f"heldout_fraction must be in [0, 1), got {heldout_fraction}")
        n_held = min(int(round(heldout_fraction * len(pairs))), len(pairs) - 1)
        held_idx = {int(i) for i in np.random.default_rng(seed).permutation(len(pairs))[:n_held]}
    return GroupSplit(trained=tuple(p for i, p in enumerate(pairs) if i not in held_idx),
                      heldout=tuple(p for i, p in enumerate(pairs) if i in held_idx))


def heldout_leaks(data: Mapping[str, object], strings: Sequence[str], split: GroupSplit) -> list[str]:
    """Every way a held-out group string can reach a distillation loss; empty when none can.

    Each loss term (relational, anchor, neighbourhood over the training rows; synonym, inverse
    and modified hinges over ``LOSS_PAIR_KEYS``) reads rows of the per-string arrays, and those
    rows are ``strings`` in order; the teacher targets and anchors are fitted on the same rows.
    So it suffices that the arrays have one row per string, that every index stays in range,
    and that no string is held out.
    """
    problems = [f"row {i} {s!r} is a held-out group string" for i, s in enumerate(strings) if split.is_heldout(s)]
    n = len(strings)
    for key in ("tokens", "mask", "teacher", "anchor", "group_id"):
        rows = len(data[key])  # type: ignore[arg-type]
        if rows != n:
            problems.append(f"{key} has {rows} rows for {n} training strings: a row outside the checked strings")
    rows = np.asarray(data["train_rows"])
    if rows.size and (rows.min() < 0 or rows.max() >= n):
        problems.append("train_rows indexes past the training strings")
    for key in LOSS_PAIR_KEYS:
        pairs = np.asarray(data[key]).reshape(-1, 2)
        if pairs.size and (pairs.min() < 0 or pairs.max() >= n):
            problems.append(f"{key} indexes past the training strings")
    return problems


def assert_no_heldout_leak(data: Mapping[str, object], strings: Sequence[str], split: GroupSplit) -> None:
    """Raise naming the first leaks when a held-out group string could reach a loss term."""
    problems = heldout_leaks(data, strings, split)
    if problems:
        raise ValueError(f"held-out synonym groups {sorted(split.heldout_groups)} leak into distillation: "
                         + "; ".join(problems[:5]) + (f" (+{len(problems) - 5} more)" if len(problems) > 5 else ""))
