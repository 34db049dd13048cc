"""One fact stated from both ends: each predicate logit averaged with its converse statement's.

"a in front of b" and "b behind a" say the same thing, and so do "a near b" and "b near a". The
model scores the two statements separately, on two ordered pairs with two pair features, and
nothing in training ties them, so their logits disagree by the model's noise. The predicate
knowledge (``relate/predicate_knowledge.yaml``) says which groups are inverses of each other and
which are symmetric. With ``model.converse_scoring`` on, the predictor replaces the logit of
(s, o, p) with the mean of it and the best logit of p's converse group on (o, s): the inverse
group's forms for a directional group with an inverse, p's own group for a symmetric one.

Left alone: a string in no group of the knowledge file, a group with no converse ("holding",
"part of"), a converse group none of whose forms are in the vocabulary, and a pair whose
reversal the pair sampler did not keep. The pair's relatedness logit (Eq. 6's l_pair) stays its
own: it is a fact about the ordered pair, not a statement of one predicate.

This is inference over what the model already scores, not a change to the model: both statements
come from the same forward pass, and the training loss never sees the average.

It must not carry supervision across the line a held-out protocol draws. A model trained without
"behind" (an OvR-SGG compliant run) but with "in front of" would otherwise score the novel
"a behind b" half by the trained "b in front of a". Given the groups the model was trained on
(its training bank's), a group it was trained on and one it was not are never each other's
converse: a novel predicate is averaged only with a novel converse (or itself, when symmetric).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from relate.predicate_knowledge import PredicateKnowledge, load_predicate_knowledge

__all__ = ["ConverseMap", "converse_map", "converse_partners", "converse_logits"]


@dataclass(frozen=True)
class ConverseMap:
    """Where each vocabulary string's converse statements are.

    ``order`` lists the columns whose group is in the vocabulary's converse table, sorted by group;
    ``starts`` is where each group's run begins in ``order`` (``np.maximum.reduceat`` offsets);
    ``partner`` (V,) is, per column, the run of its converse group, -1 where it has none.
    """

    order: np.ndarray
    starts: np.ndarray
    partner: np.ndarray

    @property
    def active(self) -> bool:
        return bool((self.partner >= 0).any())


def converse_map(strings: Sequence[str], knowledge: PredicateKnowledge | None = None,
                 trained: Iterable[str] | None = None) -> ConverseMap:
    """The converse table of a vocabulary, from the predicate knowledge's groups. With ``trained`` (the
    strings the model was trained on), a group among theirs and a group outside never pair up."""
    knowledge = knowledge if knowledge is not None else load_predicate_knowledge()
    seen = None if trained is None else {g.name for g in map(knowledge.group_of, trained) if g is not None}
    groups = [knowledge.group_of(s) for s in strings]
    names = sorted({g.name for g in groups if g is not None})
    run = {name: k for k, name in enumerate(names)}
    col_group = np.array([run[g.name] if g is not None else -1 for g in groups], dtype=np.int64)
    known = np.flatnonzero(col_group >= 0)
    order = known[np.argsort(col_group[known], kind="stable")]
    starts = np.searchsorted(col_group[order], np.arange(len(names)))
    partner = np.full(len(strings), -1, dtype=np.int64)
    for j, g in enumerate(groups):
        if g is None:
            continue
        other = g.name if g.symmetric else g.inverse
        if other is not None and other in run and (seen is None or (g.name in seen) == (other in seen)):
            partner[j] = run[other]
    return ConverseMap(order, starts, partner)


def converse_partners(strings: Sequence[str], cmap: ConverseMap) -> dict[str, tuple[str, ...]]:
    """Each string of ``strings`` (the vocabulary ``cmap`` was built over) whose logit is averaged with
    a converse statement's, mapped to the strings whose best logit on the reversed pair that is."""
    ends = np.append(cmap.starts[1:], len(cmap.order))
    return {strings[j]: tuple(strings[i] for i in cmap.order[cmap.starts[r]:ends[r]])
            for j, r in enumerate(cmap.partner.tolist()) if r >= 0}


def converse_logits(pairs: np.ndarray, l_pred: np.ndarray, cmap: ConverseMap) -> np.ndarray:
    """``l_pred`` (P, V) over the ordered ``pairs`` (P, 2) with every cell that has a converse
    statement among the scored cells replaced by the mean of the two (a new array)."""
    l_pred = np.asarray(l_pred)
    out = l_pred.copy()
    if len(pairs) == 0 or not cmap.active:
        return out
    row = {(int(s), int(o)): i for i, (s, o) in enumerate(pairs)}
    back = np.array([row.get((int(o), int(s)), -1) for s, o in pairs], dtype=np.int64)
    rows = np.flatnonzero(back >= 0)
    if rows.size == 0:
        return out
    best = np.maximum.reduceat(l_pred[:, cmap.order], cmap.starts, axis=1)  # (P, groups)
    cols = np.flatnonzero(cmap.partner >= 0)
    conv = best[back[rows]][:, cmap.partner[cols]]  # (rows, cols): the converse group's best on (o, s)
    out[np.ix_(rows, cols)] = 0.5 * (l_pred[np.ix_(rows, cols)] + conv)
    return out
