"""One judge call as data: what the judge is shown, what it answered, and the audit row it leaves.

Both arms (per-relation A5b and whole-graph) produce :class:`JudgeCall` objects; the job turns
them into backend requests and writes one row per call to the audit table (``AUDIT_SCHEMA``), from
which every reported number is recomputed. ``context`` is for the scripted judge only (the
world's truth and the shown relations); real backends see the image and the prompt, nothing else.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pyarrow as pa

__all__ = ["JudgeCall", "AUDIT_SCHEMA", "TruthIndex", "stable_seed", "concept_key"]

AUDIT_SCHEMA = pa.schema([
    pa.field("call_id", pa.string(), nullable=False),
    pa.field("image_id", pa.string(), nullable=False),
    pa.field("arm", pa.string(), nullable=False),          # relation | graph
    pa.field("depth", pa.string()),                        # matched | deployed
    pa.field("system", pa.string()),                       # relation arm: the system; graph arm: "A|B" or the control's system
    pa.field("kind", pa.string(), nullable=False),         # asserted | corruption | compare | scramble | padding
    pa.field("subject", pa.int32()),
    pa.field("object", pa.int32()),
    pa.field("predicate", pa.string()),
    pa.field("original_predicate", pa.string()),           # corruption: the predicate it replaced
    pa.field("score", pa.float32()),
    pa.field("truth", pa.bool_()),                         # against ground truth when known, else null
    pa.field("first", pa.string()),                        # graph arm: label of the graph shown first
    pa.field("second", pa.string()),
    pa.field("first_size", pa.int32()),
    pa.field("second_size", pa.int32()),
    pa.field("vote", pa.int32()),
    pa.field("prompt", pa.string(), nullable=False),
    pa.field("image_sha1", pa.string(), nullable=False),   # of the rendered PNG the judge saw
    pa.field("raw_answer", pa.string()),
    pa.field("verdict", pa.string()),                      # yes | no | first | second | tie | null (unparseable)
])


def stable_seed(*parts: Any) -> int:
    """A 32-bit value from any printable parts, uniform and deterministic across processes.

    A cryptographic digest rather than crc32: the scripted judge uses it as a coin, and crc32 of
    strings differing in a few characters is far from independent.
    """
    return int.from_bytes(hashlib.blake2b("|".join(map(str, parts)).encode(), digest_size=4).digest(), "little")


def concept_key(predicate: str) -> str:
    """The synthetic world's concept of a surface string; the normalised string otherwise."""
    from relate.data.lexicon import SURFACE_TO_CONCEPT
    from relate.judge.information import normalise_predicate

    p = normalise_predicate(predicate)
    return SURFACE_TO_CONCEPT.get(p, p)


class TruthIndex:
    """Is (subject, predicate, object) true of the image? Ground truth plus inverses and symmetry.

    Synonymous surface forms count as the same relation (concept level), so a system saying
    "next to" where the annotation says "near" is not a false relation.
    """

    def __init__(self, relations: Iterable[Mapping[str, Any]]) -> None:
        from relate.data.lexicon import CONCEPTS

        self._keys: set[tuple[int, int, str]] = set()
        for r in relations:
            s, o, c = int(r["subject"]), int(r["object"]), concept_key(r["predicate"])
            self._keys.add((s, o, c))
            concept = CONCEPTS.get(c)
            if concept is not None and concept.symmetric:
                self._keys.add((o, s, c))
            elif concept is not None and concept.inverse:
                self._keys.add((o, s, concept.inverse))

    def __call__(self, subject: int, obj: int, predicate: str) -> bool:
        return (int(subject), int(obj), concept_key(predicate)) in self._keys


@dataclass
class JudgeCall:
    """A rendered request: audit fields, the prompt, the image shown, the scripted judge's context."""

    record: dict[str, Any]
    prompt: str
    image: np.ndarray
    context: dict[str, Any] = field(default_factory=dict)

    @property
    def call_id(self) -> str:
        return self.record["call_id"]

    def audit_row(self, image_sha1: str, raw_answer: str | None, verdict: str | None) -> dict[str, Any]:
        row = {name: self.record.get(name) for name in AUDIT_SCHEMA.names}
        row.update(prompt=self.prompt, image_sha1=image_sha1, raw_answer=raw_answer, verdict=verdict)
        return row


def audit_table(rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    """Rows -> a typed audit table (missing optional fields become null)."""
    return pa.Table.from_pylist([{n: r.get(n) for n in AUDIT_SCHEMA.names} for r in rows], schema=AUDIT_SCHEMA)


__all__.append("audit_table")
