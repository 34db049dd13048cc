"""Predicate knowledge read from its one file, ``relate/predicate_knowledge.yaml``.

Synonym groups with their family, inverse, symmetry and implied contact, the families, the
string-level inverse pairs, and which relations entail which. The gate's canonical map, the text space, the synthetic lexicon and
the scripted annotator take these facts from here and keep no copy, so nothing has to be kept in
agreement. Every rule the file's header states is checked on load; a refusal names the file and
the line. Imports nothing from the project, so any layer may read it.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, Mapping

import yaml

__all__ = ["KNOWLEDGE_FILE", "DECIDERS", "PredicateKnowledgeError", "Family", "SynonymGroup", "Entailment",
           "PredicateKnowledge",
           "normalise_form", "load_predicate_knowledge", "load_synonym_groups", "load_inverse_pairs"]

KNOWLEDGE_FILE = Path(__file__).resolve().parent / "predicate_knowledge.yaml"
DECIDERS: tuple[str, ...] = ("boxes", "pixels", "meaning")
_SECTIONS = ("families", "groups", "inverse_pairs")
_OPTIONAL_SECTIONS = ("entailments",)
_ENTAILMENT_KEYS = ("from", "to", "why")
_FAMILY_KEYS = ("decided_by", "layout")
_GROUP_KEYS = ("family", "forms", "inverse", "symmetric", "p_directional", "contact")
_WS = re.compile(r"\s+")


class PredicateKnowledgeError(ValueError):
    """The predicate knowledge file is malformed or breaks one of its rules; says where and why."""


@dataclass(frozen=True)
class Family:
    """A predicate family: what decides its relations, and which annotation pass states them."""

    name: str
    decided_by: Literal["boxes", "pixels", "meaning"]
    layout: bool


@dataclass(frozen=True)
class SynonymGroup:
    """One relation: its surface forms and the facts that hold for every one of them."""

    name: str
    family: str
    forms: tuple[str, ...]
    inverse: str | None
    symmetric: bool
    p_directional: float
    contact: bool

    @property
    def directional(self) -> bool:
        """Whether swapping subject and object changes the relation."""
        return not self.symmetric


@dataclass(frozen=True)
class Entailment:
    """Whenever ``premise`` holds of an ordered pair, ``conclusion`` holds of it too (group names);
    ``why`` is the file's source for it, ``derived`` marks the half restated from the other end."""

    premise: str
    conclusion: str
    why: str
    derived: bool = False


@dataclass(frozen=True)
class PredicateKnowledge:
    """Everything the file says, validated; mappings keep the file's order."""

    path: Path
    families: Mapping[str, Family]
    groups: Mapping[str, SynonymGroup]
    inverse_pairs: tuple[tuple[str, str], ...]
    group_of_form: Mapping[str, str] = field(repr=False)
    pair_of_form: Mapping[str, str] = field(repr=False)
    entailments: tuple[Entailment, ...] = ()

    def entailed_by(self, group: str) -> tuple[str, ...]:
        """The groups ``group`` entails of the same ordered pair (written and derived), file order."""
        return tuple(dict.fromkeys(e.conclusion for e in self.entailments if e.premise == group))

    def converse_of(self, group: str) -> str | None:
        """The group stating the same fact from the other end: the inverse, the group itself when
        symmetric, None when neither (``holding``'s converse is ``held_by``, ``near``'s is ``near``)."""
        g = self.groups[group]
        return g.inverse if g.inverse is not None else (g.name if g.symmetric else None)

    def group_of(self, form: str) -> SynonymGroup | None:
        """The group a bare surface form belongs to (None when it is in none)."""
        name = self.group_of_form.get(normalise_form(form))
        return None if name is None else self.groups[name]

    def inverse_form(self, form: str) -> str | None:
        """The string paired with ``form`` in ``inverse_pairs`` (None when it has no pair)."""
        return self.pair_of_form.get(normalise_form(form))

    def families_decided_by(self, decider: str) -> tuple[str, ...]:
        """Family names decided by ``decider`` (one of :data:`DECIDERS`), in file order."""
        if decider not in DECIDERS:
            raise ValueError(f"unknown decider {decider!r}; valid: {list(DECIDERS)}")
        return tuple(f.name for f in self.families.values() if f.decided_by == decider)


def normalise_form(text: str) -> str:
    """Lower-case, trim and collapse inner whitespace: the key every form lookup uses."""
    return _WS.sub(" ", str(text).strip().lower())


# -- YAML with line numbers ---------------------------------------------------------------------
class _Lined(dict):
    """A YAML mapping that remembers the line of each key."""

    lines: dict[Any, int]


class _LinedList(list):
    """A YAML sequence that remembers the line of each item."""

    lines: list[int]


class _LineLoader(yaml.SafeLoader):
    """Safe YAML that keeps lines and refuses a key given twice (plain YAML keeps the last)."""

    path: Path


def _construct_map(loader: _LineLoader, node: yaml.MappingNode) -> _Lined:
    loader.flatten_mapping(node)
    out = _Lined()
    out.lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        if key in out:
            raise PredicateKnowledgeError(f"{loader.path}:{line}: {key!r} is given twice "
                                          f"(first on line {out.lines[key]})")
        out[key] = loader.construct_object(value_node, deep=True)
        out.lines[key] = line
    return out


def _construct_seq(loader: _LineLoader, node: yaml.SequenceNode) -> _LinedList:
    out = _LinedList(loader.construct_object(n, deep=True) for n in node.value)
    out.lines = [n.start_mark.line + 1 for n in node.value]
    return out


_LineLoader.add_constructor("tag:yaml.org,2002:map", _construct_map)
_LineLoader.add_constructor("tag:yaml.org,2002:seq", _construct_seq)


def _read(path: Path) -> _Lined:
    if not path.is_file():
        raise PredicateKnowledgeError(f"{path}: predicate knowledge file not found")
    loader = _LineLoader(path.read_text())
    loader.path = path
    try:
        tree = loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark is not None else 0
        raise PredicateKnowledgeError(f"{path}:{line}: not valid YAML: {exc.problem}") from None
    finally:
        loader.dispose()
    if not isinstance(tree, _Lined):
        raise PredicateKnowledgeError(f"{path}:1: the top level must be a mapping with {list(_SECTIONS)}")
    return tree


# -- the rules ----------------------------------------------------------------------------------
def _section(path: Path, tree: _Lined, name: str) -> Any:
    if name not in tree:
        raise PredicateKnowledgeError(f"{path}:1: section {name!r} is missing; the file needs {list(_SECTIONS)}")
    return tree[name]


def _mapping(path: Path, line: int, what: str, value: Any, keys: tuple[str, ...]) -> _Lined:
    if not isinstance(value, _Lined):
        raise PredicateKnowledgeError(f"{path}:{line}: {what} must be a mapping with keys from {list(keys)}")
    unknown = [k for k in value if k not in keys]
    if unknown:
        raise PredicateKnowledgeError(f"{path}:{value.lines[unknown[0]]}: {what} has unknown key {unknown[0]!r}; "
                                      f"valid: {list(keys)}")
    return value


def _name(path: Path, line: int, what: str, key: Any) -> str:
    if not isinstance(key, str) or not key:
        raise PredicateKnowledgeError(f"{path}:{line}: {what} name {key!r} is not a string; quote it")
    return key


def _bool(path: Path, line: int, what: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise PredicateKnowledgeError(f"{path}:{line}: {what} must be true or false, got {value!r}")
    return value


def _parse_families(path: Path, raw: Any) -> dict[str, Family]:
    if not isinstance(raw, _Lined) or not raw:
        raise PredicateKnowledgeError(f"{path}:1: 'families' must be a non-empty mapping")
    out = {}
    for key, spec in raw.items():
        line = raw.lines[key]
        name = _name(path, line, "family", key)
        spec = _mapping(path, line, f"family {name!r}", spec, _FAMILY_KEYS)
        decider = spec.get("decided_by")
        if decider not in DECIDERS:
            raise PredicateKnowledgeError(f"{path}:{line}: family {name!r} decided_by {decider!r}; "
                                          f"valid: {list(DECIDERS)}")
        layout = _bool(path, line, f"family {name!r} layout", spec.get("layout"))
        out[name] = Family(name, decider, layout)
    return out


def _parse_group(path: Path, line: int, name: str, spec: Any, families: Mapping[str, Family]) -> SynonymGroup:
    at = f"{path}:{line}"
    spec = _mapping(path, line, f"group {name!r}", spec, _GROUP_KEYS)
    family = spec.get("family")
    if family not in families:
        raise PredicateKnowledgeError(f"{at}: group {name!r} has unknown family {family!r}; valid: {list(families)}")
    forms = spec.get("forms")
    if not isinstance(forms, _LinedList) or not forms:
        raise PredicateKnowledgeError(f"{at}: group {name!r} needs a non-empty list 'forms'")
    for form, form_line in zip(forms, forms.lines):
        if not isinstance(form, str) or not normalise_form(form):
            # YAML 1.1 reads bare on/off/yes/no as booleans
            raise PredicateKnowledgeError(f"{path}:{form_line}: group {name!r} has form {form!r}, not a string; "
                                          "quote it")
    inverse = spec.get("inverse")
    if inverse is not None and not isinstance(inverse, str):
        raise PredicateKnowledgeError(f"{at}: group {name!r} has inverse {inverse!r}, not a group name; quote it")
    symmetric = _bool(path, line, f"group {name!r} symmetric", spec.get("symmetric", False))
    contact = _bool(path, line, f"group {name!r} contact", spec.get("contact", False))
    if inverse == name:
        raise PredicateKnowledgeError(f"{at}: group {name!r} is its own inverse but not symmetric; write "
                                      "'symmetric: true' instead of naming itself")
    if symmetric and inverse is not None:
        raise PredicateKnowledgeError(f"{at}: group {name!r} is symmetric yet names inverse {inverse!r}")
    p_dir = spec.get("p_directional", 0.0 if symmetric else 1.0)
    if isinstance(p_dir, bool) or not isinstance(p_dir, (int, float)) or not 0.0 <= p_dir <= 1.0:
        raise PredicateKnowledgeError(f"{at}: group {name!r} p_directional={p_dir!r} is not a number in [0, 1]")
    return SynonymGroup(name, family, tuple(normalise_form(f) for f in forms), inverse, symmetric, float(p_dir),
                        contact)


def _parse_groups(path: Path, raw: Any,
                  families: Mapping[str, Family]) -> tuple[dict[str, SynonymGroup], dict[str, str]]:
    if not isinstance(raw, _Lined) or not raw:
        raise PredicateKnowledgeError(f"{path}:1: 'groups' must be a non-empty mapping")
    groups: dict[str, SynonymGroup] = {}
    owner: dict[str, str] = {}
    for key, spec in raw.items():
        line = raw.lines[key]
        g = _parse_group(path, line, _name(path, line, "group", key), spec, families)
        for form, form_line in zip(g.forms, spec["forms"].lines):
            if form in owner:
                raise PredicateKnowledgeError(f"{path}:{form_line}: {form!r} is in two groups: {owner[form]!r} and "
                                              f"{g.name!r}")
            owner[form] = g.name
        groups[g.name] = g
    for g in groups.values():
        if g.inverse is None:
            continue
        line = raw.lines[g.name]
        if g.inverse not in groups:
            raise PredicateKnowledgeError(f"{path}:{line}: group {g.name!r} names unknown inverse {g.inverse!r}")
        other = groups[g.inverse]
        if other.inverse != g.name:
            raise PredicateKnowledgeError(f"{path}:{line}: the inverse is not mutual: {g.name!r} -> {other.name!r} -> "
                                          f"{other.inverse!r}")
        for fact in ("family", "contact"):  # swapping the roles changes neither what decides it nor touching
            if getattr(g, fact) != getattr(other, fact):
                raise PredicateKnowledgeError(f"{path}:{line}: inverse groups {g.name!r} and {other.name!r} differ in "
                                              f"{fact} ({getattr(g, fact)!r} vs {getattr(other, fact)!r})")
    return groups, owner


def _parse_pairs(path: Path, raw: Any, groups: Mapping[str, SynonymGroup],
                 owner: Mapping[str, str]) -> tuple[tuple[tuple[str, str], ...], dict[str, str]]:
    if not isinstance(raw, _LinedList):
        raise PredicateKnowledgeError(f"{path}:1: 'inverse_pairs' must be a list of [a, b] pairs")
    partner: dict[str, str] = {}
    pairs: list[tuple[str, str]] = []
    for item, line in zip(raw, raw.lines):
        if not isinstance(item, list) or len(item) != 2 or not all(isinstance(s, str) for s in item):
            raise PredicateKnowledgeError(f"{path}:{line}: expected a pair of two strings [a, b], got {item!r}")
        a, b = normalise_form(item[0]), normalise_form(item[1])
        for s in (a, b):
            if s not in owner:
                raise PredicateKnowledgeError(f"{path}:{line}: {s!r} is in no group")
            if s in partner:
                raise PredicateKnowledgeError(f"{path}:{line}: {s!r} is already paired with {partner[s]!r}; "
                                              "a string has one inverse")
        ga, gb = groups[owner[a]], groups[owner[b]]
        if ga.inverse != gb.name:
            raise PredicateKnowledgeError(f"{path}:{line}: the groups of ({a!r}, {b!r}), {ga.name!r} and {gb.name!r}, "
                                          "are not declared inverses")
        partner[a], partner[b] = b, a
        pairs.append((a, b))
    return tuple(pairs), partner


def _parse_entailments(path: Path, raw: Any, groups: Mapping[str, SynonymGroup]) -> tuple[Entailment, ...]:
    """The written entailments and, for each whose premise has an inverse, the derived one from the
    other end (inverse premise entails inverse conclusion, or the conclusion itself when symmetric)."""
    if not isinstance(raw, _LinedList):
        raise PredicateKnowledgeError(f"{path}:1: 'entailments' must be a list of {{from, to, why}} mappings")
    out: list[Entailment] = []
    seen: dict[tuple[str, str], int] = {}
    for item, line in zip(raw, raw.lines):
        spec = _mapping(path, line, "entailment", item, _ENTAILMENT_KEYS)
        a, b, why = spec.get("from"), spec.get("to"), spec.get("why")
        for what, name in (("from", a), ("to", b)):
            if not isinstance(name, str) or name not in groups:
                raise PredicateKnowledgeError(f"{path}:{line}: entailment {what} {name!r} is not a group name; "
                                              "quote words YAML reads as booleans ('on')")
        if a == b:
            raise PredicateKnowledgeError(f"{path}:{line}: {a!r} entails itself")
        if not isinstance(why, str) or not why.strip():
            raise PredicateKnowledgeError(f"{path}:{line}: entailment {a!r} -> {b!r} needs a 'why': where the fact "
                                          "comes from")
        ga, gb = groups[a], groups[b]
        back = None
        if ga.inverse is not None:
            conclusion = b if gb.symmetric else gb.inverse
            if conclusion is None:
                raise PredicateKnowledgeError(
                    f"{path}:{line}: {a!r} has the inverse {ga.inverse!r} but {b!r} is neither symmetric nor has an "
                    f"inverse, so '{ga.inverse} -> ?' cannot be stated from the other end")
            back = Entailment(ga.inverse, conclusion, why.strip(), derived=True)
        for e in (Entailment(a, b, why.strip()), back):
            if e is None:
                continue
            key = (e.premise, e.conclusion)
            if key in seen and not e.derived:
                raise PredicateKnowledgeError(f"{path}:{line}: {e.premise!r} -> {e.conclusion!r} is given twice "
                                              f"(first on line {seen[key]})")
            if key not in seen:
                seen[key] = line
                out.append(e)
    return tuple(out)


@functools.lru_cache(maxsize=8)
def load_predicate_knowledge(path: str | Path | None = None) -> PredicateKnowledge:
    """The validated knowledge of ``path`` (default: the packaged :data:`KNOWLEDGE_FILE`), read once."""
    p = Path(path) if path is not None else KNOWLEDGE_FILE
    tree = _read(p)
    unknown = [k for k in tree if k not in _SECTIONS + _OPTIONAL_SECTIONS]
    if unknown:
        raise PredicateKnowledgeError(f"{p}:{tree.lines[unknown[0]]}: unknown section {unknown[0]!r}; "
                                      f"valid: {list(_SECTIONS + _OPTIONAL_SECTIONS)}")
    families = _parse_families(p, _section(p, tree, "families"))
    groups, owner = _parse_groups(p, _section(p, tree, "groups"), families)
    pairs, partner = _parse_pairs(p, _section(p, tree, "inverse_pairs"), groups, owner)
    entailments = _parse_entailments(p, tree["entailments"], groups) if "entailments" in tree else ()
    return PredicateKnowledge(p, MappingProxyType(families), MappingProxyType(groups), pairs,
                              MappingProxyType(owner), MappingProxyType(partner), entailments)


def load_synonym_groups(path: str | Path | None = None) -> Mapping[str, SynonymGroup]:
    """Group name -> :class:`SynonymGroup`, in file order."""
    return load_predicate_knowledge(path).groups


def load_inverse_pairs(path: str | Path | None = None) -> tuple[tuple[str, str], ...]:
    """The string-level inverse pairs (a, b), in file order."""
    return load_predicate_knowledge(path).inverse_pairs
