"""Predicate vocabularies: the generated >= 10,000-string list and user-supplied files.

The generated list is the union of every synonym-group form, every synthetic-world surface
form, and systematic modifiers over the spatial-like groups ("far above", "partly behind",
"standing just left of"), so tests and the demo can exercise a vocabulary of the paper's size
(19,103 strings in seed 001) without any downloaded resource.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Iterable, Sequence

from relate.data.lexicon import all_surface_forms
from relate.predicate_knowledge import load_inverse_pairs, load_synonym_groups
from relate.text.resources import base_form, load_modifiers, normalise_predicate

__all__ = ["build_vocabulary", "load_vocabulary_file", "VocabularyError", "modified_forms",
           "modified_base_pairs", "derived_inverse_pairs", "vocabulary_key"]


class VocabularyError(ValueError):
    """A vocabulary file or list is unusable; the message names the file."""


def _spatial_bases() -> list[str]:
    mods = load_modifiers()
    skip = tuple(w + " " for w in mods.skip_prefixes + mods.posture)
    return [f for g in load_synonym_groups().values()
            if g.family in mods.families and g.name not in mods.skip_groups
            for f in g.forms if not f.startswith(skip)]


def modified_forms(bases: Sequence[str] | None = None) -> list[str]:
    """degree x base, posture x base, posture x degree x base, in a fixed order."""
    mods = load_modifiers()
    bases = list(bases) if bases is not None else _spatial_bases()
    out = [f"{d} {b}" for d in mods.degree for b in bases]
    out += [f"{p} {b}" for p in mods.posture for b in bases]
    out += [f"{p} {d} {b}" for p in mods.posture for d in mods.posture_degree for b in bases]
    return out


def _dedup(items: Iterable[str]) -> list[str]:
    seen: dict[str, None] = {}
    for s in items:
        s = normalise_predicate(s)
        if s:
            seen.setdefault(s, None)
    return list(seen)


def build_vocabulary(limit: int | None = None) -> list[str]:
    """Base forms first (groups, then the synthetic lexicon), then modified forms; deduplicated.

    ``limit`` keeps the first ``limit`` strings (so every base form survives any limit above
    the number of base forms).
    """
    base = [f for g in load_synonym_groups().values() for f in g.forms] + all_surface_forms()
    vocab = _dedup(base + modified_forms())
    if limit is not None:
        if limit < 1:
            raise VocabularyError(f"build_vocabulary: limit must be >= 1, got {limit}")
        vocab = vocab[:limit]
    return vocab


def load_vocabulary_file(path: str | Path) -> list[str]:
    """One predicate per line; trimmed, blank lines and exact repeats dropped, order kept."""
    p = Path(path)
    if not p.is_file():
        raise VocabularyError(f"vocabulary file not found: {p}")
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise VocabularyError(f"vocabulary file {p} is not UTF-8 text: {exc}") from None
    seen: dict[str, None] = {}
    for line in lines:
        s = " ".join(line.split())
        if s:
            seen.setdefault(s, None)
    if not seen:
        raise VocabularyError(f"vocabulary file {p} holds no predicate strings")
    return list(seen)


def vocabulary_key(strings: Sequence[str]) -> str:
    """Content hash of a vocabulary (order matters: indices in the bank follow it); the Serve
    deployment keys its bank cache by it and labels a request's bank with its first 12 digits, as
    ``relate predict`` does."""
    return hashlib.sha256("\n".join(strings).encode()).hexdigest()


def modified_base_pairs(strings: Iterable[str]) -> list[tuple[str, str]]:
    """(modified form, its base form) for every modified string in ``strings`` (soft hinge)."""
    out = []
    for s in strings:
        base = base_form(s)
        if base is not None and base != normalise_predicate(s):
            out.append((normalise_predicate(s), base))
    return out


def derived_inverse_pairs(strings: Iterable[str],
                          base_pairs: Sequence[tuple[str, str]] | None = None) -> list[tuple[str, str]]:
    """Inverse pairs among ``strings`` whose bases form a pair in ``base_pairs``, keeping the
    modifier: ("far above", "far below") comes from ("above", "below")."""
    pairs = base_pairs if base_pairs is not None else load_inverse_pairs()
    partner = {a: b for a, b in pairs} | {b: a for a, b in pairs}
    present = {normalise_predicate(s) for s in strings}
    out, seen = [], set()
    for s in sorted(present):
        base = base_form(s)
        if base is None or base == s or base not in partner:
            continue
        other = s[: len(s) - len(base)] + partner[base]
        if other in present and (other, s) not in seen:
            out.append((s, other))
            seen.add((s, other))
    return out
