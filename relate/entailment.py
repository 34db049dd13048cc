"""What a stated relation says without saying it: its converse and what it entails.

Annotation states one relation per pair, from one end: our prompts ask for exactly that
(``relate/prompts/spatial.txt``: "One relation per pair; do not also give its reverse"), and so do
seed 001's (App. J). A corpus therefore leaves unstated what its statements imply: "2 left of 5"
also says "5 right of 2", "cup on table" also says "cup touching table" (and "table touching cup").
Trained as written, a model is taught that those implied facts are unlabelled at best and, by every
objective that reads an unstated cell as a negative, false. :func:`implied_relations` states them,
from two facts of ``relate/predicate_knowledge.yaml``: each group's converse (its inverse, or itself
when symmetric) and the file's sourced ``entailments``. Nothing else is added: no statistics, no
geometry, nothing read from an image.

The caller says which string states a group (``form_of``), so the implied relations come out in
the caller's own vocabulary and a group it does not train on (a held-out predicate of an OvR-SGG
split) is never stated.
"""

from __future__ import annotations

from typing import Callable, Iterable

from relate.predicate_knowledge import PredicateKnowledge, load_predicate_knowledge

__all__ = ["implied_relations"]


def implied_relations(stated: Iterable[tuple[int, int, str]], group_of: Callable[[str], str | None],
                      form_of: Callable[[str, str | None], str | None],
                      knowledge: PredicateKnowledge | None = None) -> list[tuple[int, int, str]]:
    """The (subject, object, form) relations that ``stated`` implies and does not already state.

    ``group_of(form)`` names a form's synonym group (None: a string the knowledge file does not
    know, which implies nothing); ``form_of(group, preferred)`` gives the string to state ``group``
    with, given ``preferred`` (the string-level inverse of the form being restated, or None), or
    None to leave the group unstated. Closed under converse and entailment; self-loops never occur
    (a stated self-loop implies nothing). Order: as derived, each relation once.
    """
    k = knowledge or load_predicate_knowledge()
    have: set[tuple[int, int, str]] = set()
    todo: list[tuple[int, int, str, str]] = []  # (s, o, group, form)
    for s, o, form in stated:
        g = group_of(form)
        if g is None or g not in k.groups or s == o:
            continue
        have.add((s, o, g))
        todo.append((s, o, g, form))
    out: list[tuple[int, int, str]] = []
    while todo:
        s, o, g, form = todo.pop(0)
        conv = k.converse_of(g)
        steps = [(s, o, e, None) for e in k.entailed_by(g)]
        if conv is not None:
            steps.append((o, s, conv, k.inverse_form(form) if conv != g else form))
        for s2, o2, g2, preferred in steps:
            if (s2, o2, g2) in have:
                continue
            f2 = form_of(g2, preferred)
            if f2 is None:
                continue
            have.add((s2, o2, g2))
            out.append((s2, o2, f2))
            todo.append((s2, o2, g2, f2))
    return out
