"""A held-out predicate split (OvR-SGG, seed 001 § 6.7 and App. D.7) and what training must not see.

A split names base predicates, which a compliant model may train on, and novel ones, which it may
not. The protocol follows open-vocabulary detection (OV-LVIS deletes the rare classes' annotations
and retrains): the split is a property of the training set. A novel predicate is removed with every
surface form of its synonym group (``relate/predicate_knowledge.yaml``), because "wears" held out
while "wearing" is trained on is the same supervision under another string. A base predicate that
shares a group with a novel one goes with it, and :class:`HeldOut` says which did.

The frozen text encoder is not part of the rule: like the image-text model behind an open-vocabulary
detector's classifier, it has read the novel names on the web, which the protocol permits. What it
forbids is grounded, instance-level supervision of a novel predicate: a training relation that
states it, or a string of its group in the bank the model is trained to score against.

Packaged splits live in ``relate/data/splits/``: ``vg150_ovr`` (OvSGTR's enumerated 35 base / 15
novel, with its source) and ``synthetic_ovr`` (five of the synthetic world's seventeen concepts).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import pyarrow as pa
import yaml

from relate.converse import ConverseMap, converse_partners
from relate.predicate_knowledge import load_predicate_knowledge, normalise_form

__all__ = ["SPLITS_DIR", "PredicateSplit", "HeldOut", "LeakError", "load_predicate_split", "held_out",
           "remove_held_out", "check_no_leak", "leaked_forms", "converse_leaks"]

SPLITS_DIR = Path(__file__).resolve().parent / "splits"


class LeakError(ValueError):
    """A held-out predicate, or a form of its synonym group, reached training (or, through the converse
    table, took a trained predicate's scores at inference); the message lists each."""


@dataclass(frozen=True)
class PredicateSplit:
    """One base/novel split as its file states it (forms normalised)."""

    name: str
    source: str
    base: tuple[str, ...]
    novel: tuple[str, ...]
    path: str


@dataclass(frozen=True)
class HeldOut:
    """What a compliant run removes: every normalised form below, and why each goes."""

    split: PredicateSplit
    synonyms: bool                      # whether the novel predicates' synonym groups go with them
    forms: frozenset[str]               # every surface form removed from training
    reason: Mapping[str, str]           # form -> the novel predicate it is removed for
    base_removed: tuple[str, ...]       # base predicates that share a synonym group with a novel one

    def removes(self, form: str) -> bool:
        return normalise_form(form) in self.forms


def load_predicate_split(name_or_path: str | Path) -> PredicateSplit:
    """A packaged split by name (``vg150_ovr``, ``synthetic_ovr``) or a YAML file with ``name``,
    ``source``, ``base`` and ``novel``; refused with the file and the problem named when a list is
    empty, repeats a predicate, or a predicate is both base and novel."""
    path = Path(name_or_path)
    if not path.suffix and not path.exists():
        path = SPLITS_DIR / f"{name_or_path}.yaml"
        if not path.is_file():
            known = sorted(p.stem for p in SPLITS_DIR.glob("*.yaml"))
            raise ValueError(f"predicate split {name_or_path!r}: no such file and no packaged split of that name "
                             f"(packaged: {known})")
    if not path.is_file():
        raise ValueError(f"predicate split {str(path)!r}: no such file")
    doc = yaml.safe_load(path.read_text())
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: a predicate split is a mapping with name, source, base and novel")
    missing = [k for k in ("name", "source", "base", "novel") if k not in doc]
    if missing:
        raise ValueError(f"{path}: missing {missing}")
    lists = {}
    for key in ("base", "novel"):
        raw = doc[key]
        if not isinstance(raw, list) or not raw or not all(isinstance(x, str) and x.strip() for x in raw):
            raise ValueError(f"{path}: {key!r} must be a non-empty list of predicate strings "
                             "(quote YAML 1.1 booleans such as \"on\")")
        forms = [normalise_form(x) for x in raw]
        dup = sorted({f for f in forms if forms.count(f) > 1})
        if dup:
            raise ValueError(f"{path}: {key!r} lists {dup} more than once")
        lists[key] = tuple(forms)
    both = sorted(set(lists["base"]) & set(lists["novel"]))
    if both:
        raise ValueError(f"{path}: {both} are both base and novel")
    return PredicateSplit(str(doc["name"]), str(doc["source"]), lists["base"], lists["novel"], str(path))


def _group_forms(form: str) -> tuple[str, ...]:
    group = load_predicate_knowledge().group_of(form)
    return (form,) if group is None else tuple(dict.fromkeys((form, *(normalise_form(f) for f in group.forms))))


def held_out(split: PredicateSplit, synonyms: bool = True) -> HeldOut:
    """The forms a compliant run removes: the novel predicates and, with ``synonyms``, every form of
    their synonym groups (a base predicate among them is removed too and listed in ``base_removed``)."""
    reason: dict[str, str] = {}
    for novel in split.novel:
        for form in (_group_forms(novel) if synonyms else (novel,)):
            reason.setdefault(form, novel)
    base_removed = tuple(b for b in split.base if b in reason)
    return HeldOut(split, synonyms, frozenset(reason), reason, base_removed)


def remove_held_out(table: pa.Table, held: HeldOut) -> tuple[pa.Table, int, int]:
    """(``table`` without a relation whose predicate is held out, relations removed, images left with
    none). Images stay: their boxes still teach which pairs hold no base relation."""
    rels = table.column("relations").to_pylist()
    kept = [[r for r in rs if not held.removes(r["predicate"])] for rs in rels]
    removed = sum(len(a) - len(b) for a, b in zip(rels, kept))
    emptied = sum(1 for a, b in zip(rels, kept) if a and not b)
    if not removed:
        return table, 0, 0
    col = table.schema.get_field_index("relations")
    return table.set_column(col, table.schema.field(col), pa.array(kept, type=table.schema.field(col).type)), \
        removed, emptied


def leaked_forms(split: PredicateSplit, strings: Iterable[str]) -> dict[str, str]:
    """Each string of ``strings`` that is a novel predicate or a form of a novel predicate's synonym
    group, mapped to that novel predicate. Always checks the whole groups, whatever a run removed."""
    full = held_out(split, synonyms=True)
    return {s: full.reason[normalise_form(s)] for s in dict.fromkeys(strings) if full.removes(s)}


def converse_leaks(split: PredicateSplit, strings: Sequence[str], cmap: ConverseMap,
                   trained: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """Each novel string of ``strings`` (a form of a novel predicate's synonym group) that ``cmap``, the
    converse table over ``strings`` (relate.converse), averages with a base form whose group the model
    was trained on (a group with a string among ``trained``), mapped to those forms: on the reversed
    pair that novel score would be half the trained predicate's."""
    full, knowledge = held_out(split, synonyms=True), load_predicate_knowledge()
    seen = {g.name for g in map(knowledge.group_of, trained) if g is not None}
    out = {}
    for s, partners in converse_partners(strings, cmap).items():
        if not full.removes(s):
            continue
        base = tuple(p for p in partners if not full.removes(p) and knowledge.group_of(p).name in seen)
        if base:
            out[s] = base
    return out


def check_no_leak(split: PredicateSplit, where: Mapping[str, Iterable[str]]) -> None:
    """Refuse training inputs that still hold a novel predicate or a synonym of one. ``where`` maps a
    place (``training bank``, ``training relations``, ...) to its strings; the error names each
    leaked string, the novel predicate it belongs to, where it was found and how often."""
    found, total = [], 0
    for place, strings in where.items():
        strings = list(strings)
        leaks = leaked_forms(split, strings)
        if not leaks:
            continue
        total += len(leaks)
        items = []
        for s, novel in list(leaks.items())[:8]:
            n = sum(1 for x in strings if x == s)
            items.append(f"{s!r} (synonym group of novel {novel!r})" + (f" x{n}" if n > 1 else ""))
        more = f" and {len(leaks) - 8} more" if len(leaks) > 8 else ""
        found.append(f"in the {place}: " + ", ".join(items) + more)
    if found:
        raise LeakError(f"held-out split {split.name!r} ({split.path}): {total} novel form(s) reached training; "
                        + "; ".join(found) + ". Remove every form of a novel predicate's synonym group "
                        "(data.hold_out.synonyms: true)")
