"""Prompt templates for the annotation passes and the judge, stored as text files (our own wording).

``semantic`` asks for actions and interactions with an open vocabulary and forbids layout words;
``grow`` adds only new, non-synonym relations to a draft; ``spatial`` asks for depth, contact and
proximity before left/right (seed 001, App. C.1); ``pairs`` asks for every relation of a few listed
pairs (``relate.pair_sample``); ``judge`` asks whether one highlighted relation holds (seed 001, §6.5). Placeholders use ``$name`` so the JSON examples need no escaping.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from string import Template
from typing import Any, Sequence

__all__ = ["PromptTemplate", "load_prompt", "PROMPT_NAMES", "object_list", "draft_list", "pair_list"]

_DIR = Path(__file__).parent
PROMPT_NAMES = ("semantic", "grow", "spatial", "pairs", "judge")


@dataclass(frozen=True)
class PromptTemplate:
    name: str
    text: str

    @property
    def fields(self) -> list[str]:
        return sorted({m.group("named") or m.group("braced") for m in Template.pattern.finditer(self.text)
                       if m.group("named") or m.group("braced")})

    def render(self, **values: Any) -> str:
        """Fill every placeholder; a missing or unexpected value is an error naming the template."""
        missing = [f for f in self.fields if f not in values]
        extra = [k for k in values if k not in self.fields]
        if missing or extra:
            raise KeyError(f"prompt {self.name!r}: missing {missing}, unexpected {extra}; fields are {self.fields}")
        return Template(self.text).substitute(**{k: str(v) for k, v in values.items()})


@lru_cache(maxsize=None)
def load_prompt(name: str, directory: str | None = None) -> PromptTemplate:
    """The template ``name`` from this folder (or ``directory``, to try other wordings)."""
    base = Path(directory) if directory else _DIR
    path = base / f"{name}.txt"
    if not path.is_file():
        valid = sorted(p.stem for p in base.glob("*.txt"))
        raise FileNotFoundError(f"no prompt {name!r} in {base}; valid: {valid}")
    return PromptTemplate(name, path.read_text())


def object_list(categories: Sequence[str | None], id_base: int = 1) -> str:
    """One line per object: ``<number>: <category>`` (unknown categories read "object")."""
    return "\n".join(f"{i + id_base}: {c or 'object'}" for i, c in enumerate(categories))


def draft_list(relations: Sequence[tuple[int, str, int]], categories: Sequence[str | None], id_base: int = 1) -> str:
    """The draft graph as lines ``<s> (<cat>) <predicate> <o> (<cat>)``; "(none yet)" when empty."""
    if not relations:
        return "(none yet)"
    def cat(i: int) -> str:
        return (categories[i] if 0 <= i < len(categories) else None) or "object"
    return "\n".join(f"{s + id_base} ({cat(s)}) {p} {o + id_base} ({cat(o)})" for s, p, o in relations)


def pair_list(pairs: Sequence[tuple[int, int]], categories: Sequence[str | None], id_base: int = 1) -> str:
    """One line per pair: ``<a> (<cat>) and <b> (<cat>)``; "(none)" when empty."""
    if not pairs:
        return "(none)"
    def cat(i: int) -> str:
        return (categories[i] if 0 <= i < len(categories) else None) or "object"
    return "\n".join(f"{a + id_base} ({cat(a)}) and {b + id_base} ({cat(b)})" for a, b in pairs)
