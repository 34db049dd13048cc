"""PoporoIN's first stage (seed 000, Sec. 3.3) without the calling: the four cell prompts, the class
list an LLM sees, and the reading of its answer back into class pairs.

Each annotation cell has its own prompt (``relate/prompts/poporo_<cell>.txt``, our own wording of
the paper's description of the cell). An answer is read whatever form it takes: a JSON list of
pairs or of two-name objects (``{"pairs": [...]}`` too), quoted ``["a", "b"]`` pairs from a
truncated JSON text, or one pair per line (``1. a - b``, ``- a, b``, ``a -> b``, ``a | b``), with
or without code fences. Names are matched to the class list ignoring case, spacing, quotes and
markdown; what does not match is counted, never guessed: unknown names, names shared by several
classes (ImageNet has two "crane"s; the prompt shows those with their folder name), a class paired
with itself, and repeats (``b - a`` repeats ``a - b``: a pair is unordered).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from relate.data.poporo import read_class_names
from relate.prompts import load_prompt

__all__ = ["CELLS", "ClassList", "load_class_list", "cell_prompt", "ParsedAnswer", "parse_pairs",
           "union_pairs"]

CELLS = ("CR", "TR", "CD", "SD")  # the annotation cells, one prompt each (P1 CR, P2 TR, P3 SD, P4 CD)


def _norm(name: str) -> str:
    """A name as matched: case-folded, markdown and quotes stripped, spacing collapsed."""
    s = name.strip().strip("*_`\"'“”‘’").strip()
    s = s.rstrip(".;:").strip()
    return " ".join(s.replace("_", " ").split()).casefold()


@dataclass(frozen=True)
class ClassList:
    """The classes an LLM may name: folder name -> the label shown in the prompt.

    A label is the class's readable name, or ``name (folder)`` when several folders share it.
    """

    labels: Mapping[str, str]

    def __post_init__(self) -> None:
        if not self.labels:
            raise ValueError("the class list is empty")

    @property
    def lookup(self) -> dict[str, str]:
        """Normalised label or folder name -> folder; a bare name shared by folders -> '' (ambiguous)."""
        out: dict[str, str] = {}
        for folder, label in self.labels.items():
            out[_norm(label)] = folder
            out[_norm(folder)] = folder
            bare = _norm(re.sub(r"\s*\([^()]*\)$", "", label))
            if bare != _norm(label):
                out[bare] = "" if out.get(bare, folder) != folder else folder
        return out

    def text(self) -> str:
        return "\n".join(self.labels[f] for f in sorted(self.labels, key=lambda f: self.labels[f].casefold()))


def load_class_list(path: str | Path) -> ClassList:
    """Classes from a ``folder name, synonyms`` file (ImageNet's LOC_synset_mapping.txt) or one class
    per line (folder and name alike). Names shared by several folders get the folder appended."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"class list not found: {p}")
    names = read_class_names(p)
    counts: dict[str, int] = {}
    for n in names.values():
        counts[_norm(n)] = counts.get(_norm(n), 0) + 1
    return ClassList({f: (f"{n} ({f})" if counts[_norm(n)] > 1 and n != f else n) for f, n in names.items()})


def cell_prompt(cell: str, classes: ClassList, n_pairs: int) -> str:
    """The prompt asking for ``cell`` pairs over ``classes`` (template ``poporo_<cell>.txt``)."""
    if cell not in CELLS:
        raise ValueError(f"unknown cell {cell!r}; valid: {list(CELLS)}")
    return load_prompt(f"poporo_{cell.lower()}").render(classes=classes.text(), n_pairs=n_pairs)


@dataclass
class ParsedAnswer:
    """The class pairs read from one answer (folder names, in answer order, each unordered pair
    once) and what was dropped on the way."""

    pairs: list[tuple[str, str]] = field(default_factory=list)
    form: str = "none"  # json | quoted_pairs | lines | none
    unknown: list[str] = field(default_factory=list)  # names matching no class (a pair with one is dropped)
    ambiguous: list[str] = field(default_factory=list)  # names shared by several classes
    duplicates: int = 0  # pairs given again (either order)
    self_pairs: int = 0  # a class paired with itself
    unread_lines: int = 0  # non-empty lines that held no pair with a known class (prose, headers)

    def counts(self) -> dict[str, int]:
        return {"pairs": len(self.pairs), "unknown": len(self.unknown), "ambiguous": len(self.ambiguous),
                "duplicates": self.duplicates, "self_pairs": self.self_pairs, "unread_lines": self.unread_lines}


_FENCE = re.compile(r"```[\w-]*\s*\n?(.*?)(?:```|$)", re.S)
_QUOTED = re.compile(r"""\[\s*"([^"\n]+)"\s*,\s*"([^"\n]+)"\s*\]""")
_MARKER = re.compile(r"^\s*(?:(?:pair\s*)?\d+\s*[.):\]]|[-*•+])\s+", re.I)
# separators, tried in order; a hyphen only counts with spaces round it ("t-shirt" is one name)
_SEPS = (r"\s*<->\s*|\s*<=>\s*|\s*->\s*|\s*→\s*|\s*↔\s*", r"\s+[-–—]+\s+|\s*[–—]\s*", r"\s*\|\s*", r"\s*\t\s*",
         r"\s*;\s*", r"\s*,\s*", r"\s+(?:and|&|vs\.?|/)\s+")


def _json_pairs(value: object) -> list[tuple[str, str]] | None:
    """Two-name items of a JSON answer (a list of lists or objects, possibly under one key)."""
    if isinstance(value, dict):
        lists = [v for v in value.values() if isinstance(v, list)]
        return _json_pairs(lists[0]) if len(lists) == 1 else None
    if not isinstance(value, list):
        return None
    out = []
    for item in value:
        names = item if isinstance(item, list) else list(item.values()) if isinstance(item, dict) else []
        names = [n for n in names if isinstance(n, str)]
        if len(names) >= 2:
            out.append((names[0], names[1]))
    return out


def _candidates(text: str) -> tuple[str, list[tuple[str, str]], int]:
    """(form, raw name pairs, lines that held no pair) of an answer."""
    fenced = _FENCE.findall(text)
    body = "\n".join(fenced) if fenced else text
    for chunk in (body.strip(), body[body.find("["):body.rfind("]") + 1], body[body.find("{"):body.rfind("}") + 1]):
        try:
            got = _json_pairs(json.loads(chunk)) if chunk else None
        except ValueError:
            continue
        if got:
            return "json", got, 0
    quoted = _QUOTED.findall(body)
    if quoted:  # JSON cut short (a token limit): the whole pairs before the cut
        return "quoted_pairs", quoted, 0
    pairs, unread = [], 0
    for raw in body.splitlines():
        line = _MARKER.sub("", raw.replace("**", "")).strip()
        if not line:
            continue
        for sep in _SEPS:
            parts = [x for x in re.split(sep, line) if x.strip()]
            if len(parts) >= 2:
                pairs.append((parts[0], parts[1]))
                break
        else:
            unread += 1
    return ("lines" if pairs else "none"), pairs, unread


def _find(name: str, lookup: Mapping[str, str]) -> str | None:
    """The folder a name means ('' when several): as written, else without a trailing remark
    ("wine bottle (used together)", "wine bottle: used together") or a leading "the"."""
    key = _norm(name)
    for k in (key, _norm(re.sub(r"\s*\([^()]*\)\s*$", "", name)), _norm(re.split(r":\s", name)[0])):
        for k2 in (k, k[4:] if k.startswith("the ") else k):
            if k2 in lookup:
                return lookup[k2]
    return None


def parse_pairs(text: str, classes: ClassList) -> ParsedAnswer:
    """Class pairs from an LLM answer in any of the forms the module docstring lists."""
    lookup = classes.lookup
    form, raw, unread = _candidates(text or "")
    out = ParsedAnswer(form=form, unread_lines=unread)
    seen: set[frozenset[str]] = set()
    for a, b in raw:
        folders = [_find(name, lookup) for name in (a, b)]
        if form == "lines" and all(f is None for f in folders):
            out.unread_lines += 1  # a prose line with a separator in it, not a pair of class names
            continue
        bad = False
        for name, folder in zip((a, b), folders):
            if folder is None:
                out.unknown.append(name.strip())
                bad = True
            elif folder == "":
                out.ambiguous.append(name.strip())
                bad = True
        if bad:
            continue
        if folders[0] == folders[1]:
            out.self_pairs += 1
            continue
        key2 = frozenset(folders)
        if key2 in seen:
            out.duplicates += 1
            continue
        seen.add(key2)
        out.pairs.append((folders[0], folders[1]))
    return out


def union_pairs(answers: Iterable[tuple[str, str, Sequence[tuple[str, str]]]]) -> list[dict]:
    """The union over answers ``(cell, model, pairs)``: one row per cell and unordered pair, in the
    orientation first proposed, with the models that proposed it (sorted): the columns of the
    review stage's proposals table (:func:`relate.audit.review_store.load_proposals`)."""
    rows: dict[tuple[str, frozenset[str]], dict] = {}
    for cell, model, pairs in answers:
        for a, b in pairs:
            r = rows.setdefault((cell, frozenset((a, b))), {"pair_id": f"{cell}:{a},{b}", "cell": cell,
                                                            "class_a": a, "class_b": b, "models": set()})
            r["models"].add(model)
    out = [dict(r, models=sorted(r["models"])) for r in rows.values()]
    return sorted(out, key=lambda r: (CELLS.index(r["cell"]), r["class_a"], r["class_b"]))
