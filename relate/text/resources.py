"""The text space's view of the predicate knowledge: modifiers, base forms, restatements, P(directional).

Synonym groups and inverse pairs are read from ``relate.predicate_knowledge`` (their one file);
this module adds what only the text space needs (seed 001, 3.3 and B.2): the degree and posture
modifiers of ``relate/text/data/modifiers.yaml``, the base form under them, the phrase that
restates a string from the other endpoint, and the swap hinge's P(directional).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

import numpy as np
import yaml

from relate.predicate_knowledge import load_predicate_knowledge
from relate.predicate_knowledge import normalise_form as normalise_predicate

__all__ = [
    "DATA_DIR", "ResourceError", "Modifiers", "normalise_predicate", "load_modifiers", "group_of", "base_form",
    "is_directional", "p_directional", "synonym_pairs", "inverse_of", "restatement_of",
]

DATA_DIR = Path(__file__).resolve().parent / "data"


class ResourceError(ValueError):
    """The modifiers file is malformed or inconsistent; the message says where and why."""


@dataclass(frozen=True)
class Modifiers:
    families: tuple[str, ...]
    degree: tuple[str, ...]
    posture: tuple[str, ...]
    posture_degree: tuple[str, ...] = ()
    skip_prefixes: tuple[str, ...] = ()
    skip_groups: tuple[str, ...] = ()


def _read_yaml(path: Path) -> dict:
    if not path.is_file():
        raise ResourceError(f"predicate resource file not found: {path}")
    tree = yaml.safe_load(path.read_text())
    if not isinstance(tree, dict):
        raise ResourceError(f"{path}: top level must be a mapping")
    return tree


@functools.lru_cache(maxsize=8)
def load_modifiers(path: str | Path | None = None) -> Modifiers:
    """Degree and posture modifiers plus the families they apply to."""
    p = Path(path) if path is not None else DATA_DIR / "modifiers.yaml"
    tree = _read_yaml(p)
    try:
        mods = Modifiers(families=tuple(tree["families"]),
                         degree=tuple(normalise_predicate(x) for x in tree["degree"]),
                         posture=tuple(normalise_predicate(x) for x in tree["posture"]),
                         posture_degree=tuple(normalise_predicate(x) for x in tree.get("posture_degree", [])),
                         skip_prefixes=tuple(tree.get("skip_bases_starting_with", [])),
                         skip_groups=tuple(tree.get("skip_groups", [])))
    except KeyError as exc:
        raise ResourceError(f"{p}: missing key {exc.args[0]!r}") from None
    if not set(mods.posture_degree) <= set(mods.degree):
        raise ResourceError(f"{p}: posture_degree words must also be degree words: "
                            f"{sorted(set(mods.posture_degree) - set(mods.degree))}")
    if set(mods.degree) & set(mods.posture):
        raise ResourceError(f"{p}: words in both degree and posture: {sorted(set(mods.degree) & set(mods.posture))}")
    knowledge = load_predicate_knowledge()
    for what, names, known in (("families", mods.families, knowledge.families),
                               ("skip_groups", mods.skip_groups, knowledge.groups)):
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ResourceError(f"{p}: {what} {unknown} are not in {knowledge.path}; valid: {list(known)}")
    return mods


@functools.lru_cache(maxsize=1)
def _modifier_words() -> tuple[tuple[str, ...], tuple[str, ...]]:
    # Longest first so "very slightly" wins over a shorter word it starts with.
    mods = load_modifiers()
    return (tuple(sorted(mods.posture, key=len, reverse=True)),
            tuple(sorted(mods.degree, key=len, reverse=True)))


def _form_index() -> Mapping[str, str]:
    return load_predicate_knowledge().group_of_form


def group_of(pred: str) -> str | None:
    """Synonym group of a bare surface form (None when it has none)."""
    return _form_index().get(normalise_predicate(pred))


def base_form(pred: str) -> str | None:
    """The grouped base form under posture/degree modifiers ("standing far above" -> "above")."""
    s = normalise_predicate(pred)
    index = _form_index()
    if s in index:
        return s
    posture, degree = _modifier_words()
    for word in posture:
        if s.startswith(word + " "):
            s = s[len(word) + 1:]
            break
    if s in index:
        return s
    for word in degree:
        if s.startswith(word + " ") and s[len(word) + 1:] in index:
            return s[len(word) + 1:]
    return None


def inverse_of(pred: str) -> str | None:
    """The string-level inverse of a form (modifiers kept: "far above" -> "far below")."""
    s = normalise_predicate(pred)
    base = base_form(s)
    if base is None:
        return None
    partner = load_predicate_knowledge().inverse_form(base)
    return None if partner is None else s[: len(s) - len(base)] + partner


def restatement_of(pred: str) -> str | None:
    """The phrase that states ``pred``'s relation from the other endpoint: its string-level
    inverse, else the first form of its group's inverse group ("under" -> "above"); None for a
    string whose group has no inverse or that is in no group. The gate's balancing uses this."""
    s = normalise_predicate(pred)
    pair = inverse_of(s)
    knowledge = load_predicate_knowledge()
    group = knowledge.group_of(s)
    if pair is not None or group is None:
        return pair
    return None if group.inverse is None else knowledge.groups[group.inverse].forms[0]


def is_directional(pred: str) -> bool:
    """Whether swapping subject and object changes the relation; unknown strings are an error."""
    base = base_form(pred)
    if base is None:
        raise KeyError(f"{pred!r} is in no synonym group (nor a modified form of one); "
                       f"see {load_predicate_knowledge().path}")
    return load_predicate_knowledge().groups[_form_index()[base]].directional


def p_directional(strings: Iterable[str], unknown: float | None = None) -> np.ndarray:
    """P(directional) per string for the swap hinge (Eq. 5): 1.0 with an inverse, 0.0 symmetric.

    Strings outside the resources raise unless ``unknown`` gives the value to use for them.
    """
    groups, index = load_predicate_knowledge().groups, _form_index()
    out = []
    for s in strings:
        base = base_form(s)
        if base is None:
            if unknown is None:
                raise KeyError(f"{s!r} has no directional flag; pass unknown=<prob> to allow it")
            out.append(float(unknown))
        else:
            out.append(groups[index[base]].p_directional)
    return np.asarray(out, dtype=np.float32)


def synonym_pairs(strings: Iterable[str] | None = None) -> list[tuple[str, str]]:
    """All within-group pairs (restricted to ``strings`` when given), in a stable order."""
    keep = None if strings is None else {normalise_predicate(s) for s in strings}
    pairs = []
    for g in load_predicate_knowledge().groups.values():
        forms = [f for f in g.forms if keep is None or f in keep]
        pairs += [(forms[i], forms[j]) for i in range(len(forms)) for j in range(i + 1, len(forms))]
    return pairs
