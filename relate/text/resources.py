"""Synonym groups, inverse pairs, directional flags and modifiers: the project's predicate data.

The files under ``relate/text/data`` are ours (seed 001, 3.3 and B.2 describe what they are
for: synonym-group positives, antonym repulsion, the swap hinge weighted by P(directional)).
Every loader validates what it reads and names the file, the line or group, and the problem.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

import numpy as np
import yaml

__all__ = [
    "DATA_DIR", "ResourceError", "SynonymGroup", "Modifiers", "normalise_predicate",
    "load_synonym_groups", "load_inverse_pairs", "load_modifiers", "group_of", "base_form",
    "is_directional", "p_directional", "synonym_pairs", "inverse_of", "restatement_of",
]

DATA_DIR = Path(__file__).resolve().parent / "data"
_WS = re.compile(r"\s+")


class ResourceError(ValueError):
    """A predicate data file is malformed or inconsistent; the message says where and why."""


@dataclass(frozen=True)
class SynonymGroup:
    name: str
    family: str
    forms: tuple[str, ...]
    inverse: str | None
    directional: bool
    p_directional: float


@dataclass(frozen=True)
class Modifiers:
    families: tuple[str, ...]
    degree: tuple[str, ...]
    posture: tuple[str, ...]
    posture_degree: tuple[str, ...] = ()
    skip_prefixes: tuple[str, ...] = ()
    skip_groups: tuple[str, ...] = ()


def normalise_predicate(text: str) -> str:
    """Lower-case, trim and collapse inner whitespace (the key every lookup uses)."""
    return _WS.sub(" ", str(text).strip().lower())


def _read_yaml(path: Path) -> dict:
    if not path.is_file():
        raise ResourceError(f"predicate resource file not found: {path}")
    tree = yaml.safe_load(path.read_text())
    if not isinstance(tree, dict):
        raise ResourceError(f"{path}: top level must be a mapping")
    return tree


def _parse_group(path: Path, name: str, spec: object) -> SynonymGroup:
    if not isinstance(spec, dict):
        raise ResourceError(f"{path}: group {name!r} must be a mapping")
    unknown = set(spec) - {"family", "forms", "inverse", "directional", "p_directional"}
    if unknown:
        raise ResourceError(f"{path}: group {name!r} has unknown keys {sorted(unknown)}")
    forms = spec.get("forms")
    if not isinstance(forms, list) or not forms:
        raise ResourceError(f"{path}: group {name!r} needs a non-empty list 'forms'")
    bad = [f for f in forms if not isinstance(f, str)]
    if bad:  # YAML 1.1 reads bare on/off/yes/no as booleans: such forms must be quoted
        raise ResourceError(f"{path}: group {name!r} has non-string forms {bad}; quote them")
    inverse = spec.get("inverse")
    directional = bool(spec.get("directional", True))
    if inverse is not None and not directional:
        raise ResourceError(f"{path}: group {name!r} has an inverse but is marked directional: false")
    p_dir = float(spec.get("p_directional", 1.0 if directional else 0.0))
    if not 0.0 <= p_dir <= 1.0:
        raise ResourceError(f"{path}: group {name!r} p_directional={p_dir} is outside [0, 1]")
    return SynonymGroup(name=name, family=str(spec.get("family", "other")),
                        forms=tuple(normalise_predicate(f) for f in forms),
                        inverse=inverse, directional=directional, p_directional=p_dir)


def _validate_groups(path: Path, groups: Mapping[str, SynonymGroup]) -> None:
    seen: dict[str, str] = {}
    for g in groups.values():
        for form in g.forms:
            if not form:
                raise ResourceError(f"{path}: group {g.name!r} has an empty form")
            if form in seen:
                raise ResourceError(f"{path}: {form!r} is in two groups: {seen[form]!r} and {g.name!r}")
            seen[form] = g.name
        if g.inverse is None:
            continue
        if g.inverse not in groups:
            raise ResourceError(f"{path}: group {g.name!r} names unknown inverse {g.inverse!r}")
        back = groups[g.inverse].inverse
        if back != g.name:
            raise ResourceError(f"{path}: inverse of inverse must be the group itself: {g.name!r} -> "
                                f"{g.inverse!r} -> {back!r}")


def parse_synonym_groups(tree: dict, path: Path) -> dict[str, SynonymGroup]:
    """Validate a parsed groups mapping (split out so tests can feed broken trees)."""
    raw = tree.get("groups")
    if not isinstance(raw, dict) or not raw:
        raise ResourceError(f"{path}: needs a non-empty 'groups' mapping")
    groups = {str(name): _parse_group(path, str(name), spec) for name, spec in raw.items()}
    _validate_groups(path, groups)
    return groups


@functools.lru_cache(maxsize=8)
def load_synonym_groups(path: str | Path | None = None) -> Mapping[str, SynonymGroup]:
    """Group name -> SynonymGroup, validated (no string in two groups; inverses are involutive)."""
    p = Path(path) if path is not None else DATA_DIR / "synonym_groups.yaml"
    return parse_synonym_groups(_read_yaml(p), p)


@functools.lru_cache(maxsize=8)
def _form_index(path: str | Path | None = None) -> Mapping[str, str]:
    return {f: g.name for g in load_synonym_groups(path).values() for f in g.forms}


def parse_inverse_pairs(lines: Iterable[str], path: Path,
                        groups: Mapping[str, SynonymGroup]) -> tuple[tuple[str, str], ...]:
    index = {f: g.name for g in groups.values() for f in g.forms}
    partner: dict[str, str] = {}
    pairs: list[tuple[str, str]] = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#") or line.strip() == "a\tb":
            continue
        cols = line.rstrip("\n").split("\t")
        if len(cols) != 2:
            raise ResourceError(f"{path}:{lineno}: expected 2 tab-separated columns, got {len(cols)}")
        a, b = normalise_predicate(cols[0]), normalise_predicate(cols[1])
        for s in (a, b):
            if s not in index:
                raise ResourceError(f"{path}:{lineno}: {s!r} is not in any synonym group")
            if s in partner:
                raise ResourceError(f"{path}:{lineno}: {s!r} already paired with {partner[s]!r}; "
                                    "the inverse of the inverse must be the string itself")
        ga, gb = groups[index[a]], groups[index[b]]
        if ga.inverse != gb.name:
            raise ResourceError(f"{path}:{lineno}: groups {ga.name!r} and {gb.name!r} of "
                                f"({a!r}, {b!r}) are not declared inverses")
        partner[a], partner[b] = b, a
        pairs.append((a, b))
    return tuple(pairs)


@functools.lru_cache(maxsize=8)
def load_inverse_pairs(path: str | Path | None = None,
                       groups_path: str | Path | None = None) -> tuple[tuple[str, str], ...]:
    """String-level inverse pairs (a, b), validated against the synonym groups."""
    p = Path(path) if path is not None else DATA_DIR / "inverse_pairs.tsv"
    if not p.is_file():
        raise ResourceError(f"predicate resource file not found: {p}")
    return parse_inverse_pairs(p.read_text().splitlines(), p, load_synonym_groups(groups_path))


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
    return mods


@functools.lru_cache(maxsize=1)
def _modifier_words() -> tuple[tuple[str, ...], tuple[str, ...]]:
    # Longest first so "very slightly" wins over a shorter word it starts with.
    mods = load_modifiers()
    return (tuple(sorted(mods.posture, key=len, reverse=True)),
            tuple(sorted(mods.degree, key=len, reverse=True)))


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
    partner = _pair_index().get(base)
    return None if partner is None else s[: len(s) - len(base)] + partner


def restatement_of(pred: str) -> str | None:
    """The phrase that states ``pred``'s relation from the other endpoint: its string-level
    inverse, else the first form of its group's inverse group ("under" -> "above"); None for a
    string whose group has no inverse or that is in no group. The gate's balancing uses this."""
    s = normalise_predicate(pred)
    pair = inverse_of(s)
    if pair is not None or s not in _form_index():
        return pair
    inverse = load_synonym_groups()[_form_index()[s]].inverse
    return None if inverse is None else load_synonym_groups()[inverse].forms[0]


@functools.lru_cache(maxsize=1)
def _pair_index() -> Mapping[str, str]:
    out: dict[str, str] = {}
    for a, b in load_inverse_pairs():
        out[a], out[b] = b, a
    return out


def is_directional(pred: str) -> bool:
    """Whether swapping subject and object changes the relation; unknown strings are an error."""
    base = base_form(pred)
    if base is None:
        raise KeyError(f"{pred!r} is in no synonym group (nor a modified form of one); "
                       f"see {DATA_DIR / 'synonym_groups.yaml'}")
    return load_synonym_groups()[_form_index()[base]].directional


def p_directional(strings: Iterable[str], unknown: float | None = None) -> np.ndarray:
    """P(directional) per string for the swap hinge (Eq. 5): 1.0 with an inverse, 0.0 symmetric.

    Strings outside the resources raise unless ``unknown`` gives the value to use for them.
    """
    groups, index = load_synonym_groups(), _form_index()
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
    for g in load_synonym_groups().values():
        forms = [f for f in g.forms if keep is None or f in keep]
        pairs += [(forms[i], forms[j]) for i in range(len(forms)) for j in range(i + 1, len(forms))]
    return pairs
