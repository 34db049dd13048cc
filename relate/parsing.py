"""Robust parsing of a VLM's relation output: free text in, relation candidates plus counted problems.

Annotators wrap JSON in prose and code fences, leave trailing commas, write ids as strings
("3", "#3", "object 3"), use Python literals, or stop mid-object. The parser takes the last JSON
value in the text that holds relations, repairs what can be repaired without guessing, and
counts every unusable output or item under a named reason. It never raises: one bad output must
not fail a batch of thousands.

Ids are the marker numbers drawn on the image (``id_base`` is the first marker number); they
are authoritative over labels, because the markers are the grounding (seed 001, §4.1). A label
that disagrees with the box's category is counted, and optionally dropped.
"""

from __future__ import annotations

import ast
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence

__all__ = ["ParsedRelation", "ParseResult", "parse_relations", "extract_json", "json_objects_from_end",
           "OUTPUT_REASONS", "ITEM_REASONS"]

OUTPUT_REASONS = ("not_text", "empty", "no_json", "no_relations", "parser_error")
ITEM_REASONS = ("not_an_object", "missing_field", "bad_id", "bad_predicate", "label_mismatch", "too_many")
MAX_CHARS = 200_000
MAX_PREDICATE_CHARS = 80

_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.S)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")
_ID = re.compile(r"^\s*(?:object|obj|box|id|#|no\.?|number)?\s*[#\[(]?\s*(-?\d+)\s*[\])]?\s*$", re.I)
_SMART = str.maketrans({"\u201c": '"', "\u201d": '"', "\u2018": "'", "\u2019": "'"})
_KEYS = {
    "subject": ("subject_id", "subject", "sub_id", "subj", "sub", "s", "source", "from", "head"),
    "object": ("object_id", "object", "obj_id", "obj", "o", "target", "to", "tail"),
    "predicate": ("predicate", "relation", "relationship", "pred", "rel", "p", "verb"),
    "subject_label": ("subject_label", "subject_name", "subject_category"),
    "object_label": ("object_label", "object_name", "object_category"),
}


@dataclass(frozen=True)
class ParsedRelation:
    subject: int          # 0-based box index (may be out of range: the gate rejects it as bad_index)
    object: int
    predicate: str
    tag: str | None = None  # injected-error label (scripted annotator only)


@dataclass
class ParseResult:
    relations: list[ParsedRelation] = field(default_factory=list)
    problems: Counter = field(default_factory=Counter)
    reason: str | None = None  # why the whole output was unusable, else None

    @property
    def usable(self) -> bool:
        return self.reason is None


def _balanced_spans(text: str) -> list[tuple[int, int]]:
    """Top-level ``{...}``/``[...]`` spans, string-aware; an unterminated tail is ignored."""
    spans, depth, start, in_str, esc = [], 0, -1, False, False
    for i, ch in enumerate(text):
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
            continue
        if ch == '"' and depth > 0:
            in_str = True
        elif ch in "{[":
            if depth == 0:
                start = i
            depth += 1
        elif ch in "}]" and depth > 0:
            depth -= 1
            if depth == 0:
                spans.append((start, i + 1))
    return spans


def _loads(chunk: str) -> Any:
    """json, then json without trailing commas, then a Python literal (single quotes, True/None)."""
    chunk = chunk.translate(_SMART).strip()
    for attempt in (chunk, _TRAILING_COMMA.sub(r"\1", chunk)):
        try:
            return json.loads(attempt)
        except (ValueError, RecursionError):
            pass
    try:
        return ast.literal_eval(_TRAILING_COMMA.sub(r"\1", chunk))
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None


def _relations_of(value: Any) -> list | None:
    """The relation list inside a parsed value, or None when it holds none."""
    if isinstance(value, dict):
        for key in ("relations", "relationships", "triplets", "edges", "scene_graph"):
            if isinstance(value.get(key), list):
                return value[key]
        if any(k in value for k in _KEYS["predicate"]) and any(k in value for k in _KEYS["subject"]):
            return [value]
        return None
    if isinstance(value, list) and all(isinstance(v, dict) for v in value) and value:
        return value
    if isinstance(value, list) and not value:
        return value
    return None


def extract_json(text: str) -> list | None:
    """The relation list of the last JSON value in ``text`` that has one (fences searched first)."""
    chunks = [m.group(1) for m in _FENCE.finditer(text)]
    chunks += [text[a:b] for a, b in _balanced_spans(text)]
    for chunk in reversed(chunks[-50:]):
        rels = _relations_of(_loads(chunk))
        if rels is not None:
            return rels
    return None


def _pick(item: dict, name: str) -> Any:
    for k in _KEYS[name]:
        if k in item:
            return item[k]
    return None


def _to_id(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str):
        m = _ID.match(v)
        return int(m.group(1)) if m else None
    return None


def _norm_label(s: Any) -> str:
    return re.sub(r"[^a-z0-9]+", " ", str(s).lower()).strip()


def _item(item: Any, id_base: int, labels: Sequence[str | None] | None, drop_mismatch: bool,
          problems: Counter) -> ParsedRelation | None:
    if not isinstance(item, dict):
        problems["not_an_object"] += 1
        return None
    raw_s, raw_o, pred = _pick(item, "subject"), _pick(item, "object"), _pick(item, "predicate")
    if raw_s is None or raw_o is None or pred is None:
        problems["missing_field"] += 1
        return None
    s, o = _to_id(raw_s), _to_id(raw_o)
    if s is None or o is None:
        problems["bad_id"] += 1
        return None
    if not isinstance(pred, str) or not pred.strip() or len(pred) > MAX_PREDICATE_CHARS:
        problems["bad_predicate"] += 1
        return None
    s, o = s - id_base, o - id_base
    if labels is not None:
        for idx, lab in ((s, _pick(item, "subject_label")), (o, _pick(item, "object_label"))):
            if lab is None or not (0 <= idx < len(labels)) or labels[idx] is None:
                continue
            if _norm_label(lab) != _norm_label(labels[idx]):
                problems["label_mismatch"] += 1
                if drop_mismatch:
                    return None
    tag = item.get("injected")
    return ParsedRelation(s, o, " ".join(pred.split()), tag if isinstance(tag, str) else None)


def parse_relations(text: Any, *, id_base: int = 1, labels: Sequence[str | None] | None = None,
                    drop_label_mismatch: bool = False, max_relations: int = 256) -> ParseResult:
    """Parse one VLM output into 0-based relation candidates; never raises."""
    res = ParseResult()
    try:
        if not isinstance(text, str):
            res.reason = "not_text"
        elif not text.strip():
            res.reason = "empty"
        else:
            rels = extract_json(text[-MAX_CHARS:])
            if rels is None:
                res.reason = "no_json" if not _balanced_spans(text[-MAX_CHARS:]) else "no_relations"
            else:
                if len(rels) > max_relations:
                    res.problems["too_many"] += len(rels) - max_relations
                for item in rels[:max_relations]:
                    r = _item(item, id_base, labels, drop_label_mismatch, res.problems)
                    if r is not None:
                        res.relations.append(r)
    except Exception:  # noqa: BLE001 - a parser bug must cost one output, not the batch
        res.relations, res.reason = [], "parser_error"
    if res.reason is not None:
        res.problems[res.reason] += 1
    return res


def json_objects_from_end(text: object, limit: int = 50):
    """Yield the JSON objects found in free text, last first, repaired as relation output is
    (code fences, trailing commas); at most ``limit`` candidates. Judge verdict parsers use it."""
    if not isinstance(text, str):
        return
    for a, b in reversed(_balanced_spans(text)[-limit:]):
        value = _loads(text[a:b])
        if isinstance(value, dict):
            yield value
