"""PoporoIN pair review (seed 000, Sec. 3.3, second stage): the proposals table and a durable
answer store.

Proposals table (Parquet, CSV or JSON lines; one row per proposed class pair):

* ``pair_id`` (string, unique): the pair's id. Optional: when absent it is ``"<cell>:<a>,<b>"``.
* ``cell`` (string): the annotation cell the pair was proposed for, one of CR, TR, CD, SD.
* ``class_a``, ``class_b`` (strings): the two classes, as folder names of the image root (the names
  ``pipelines.poporo_in`` reads), different, without ``,`` ``#`` tab or newline.
* ``models`` (optional; a list of strings or one ``;``/``,``-joined string): the LLMs that proposed
  the pair. Kept for the report; never shown to reviewers (the review is blind to the source).

Other columns are ignored. The same (cell, class_a, class_b) twice is refused: the proposal stage
keeps the union, one row per pair.

Answers follow the audit store's pattern (:mod:`relate.audit.store`): SQLite in WAL mode, one
committed transaction per answer (``synchronous=FULL``), rows never deleted (undo marks the
reviewer's latest live answer as undone), answers keyed by reviewer so two people never overwrite
each other. Resolutions of disagreements are appended the same way; the latest one counts.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from relate.audit.store import AuditStoreError, SqliteStore, UnknownItemError, check_auditor
from relate.probe.metrics import DISTRACTOR_TYPES, RELATION_TYPES

__all__ = ["CELLS", "CELL_QUESTIONS", "DECISIONS", "REJECT_REASONS", "PROPOSAL_COLUMNS", "ReviewStore", "load_proposals",
           "check_answer", "open_review_store"]

CELLS = (*RELATION_TYPES, *DISTRACTOR_TYPES)
DECISIONS = ("accept", "reject")
# The paper's three grounds for removing a proposed pair, in our words (seed 000, Sec. 3.3, (i)-(iii)).
REJECT_REASONS = {
    "convention": "The link rests on cultural habit or convention; nothing in the pictures would show it.",
    "broad_label": "A class label is too broad for its images to carry the intended relation reliably.",
    "related_distractor": "The look-alike (colour or shape) partner is in fact related in meaning to the "
                          "other class, not merely similar in appearance.",
}
# What a reviewer checks for each cell (seed 000, Sec. 3.3, the four prompts' targets, in our words).
CELL_QUESTIONS = {
    "CR": "Related by kind: the same basic category, or things that serve the same purpose?",
    "TR": "Related by theme: used together, found in the same situation, or linked as object and place or "
          "agent and tool, while not the same kind of thing?",
    "CD": "Look-alike by colour: typically the same colour, and otherwise unrelated?",
    "SD": "Look-alike by shape: a similar outline or form, and otherwise unrelated?",
}
PROPOSAL_COLUMNS = ("pair_id", "cell", "class_a", "class_b", "models")
_BAD_CHARS = (",", "#", "\t", "\n", "\r")
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS pairs (
  pair_id TEXT PRIMARY KEY, position INTEGER NOT NULL UNIQUE, cell TEXT NOT NULL,
  class_a TEXT NOT NULL, class_b TEXT NOT NULL, models TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS answers (
  id INTEGER PRIMARY KEY AUTOINCREMENT, reviewer TEXT NOT NULL,
  pair_id TEXT NOT NULL REFERENCES pairs(pair_id),
  decision TEXT NOT NULL CHECK (decision IN {DECISIONS!r}), reason TEXT,
  created_at REAL NOT NULL, undone_at REAL);
CREATE TABLE IF NOT EXISTS resolutions (
  id INTEGER PRIMARY KEY AUTOINCREMENT, resolver TEXT NOT NULL,
  pair_id TEXT NOT NULL REFERENCES pairs(pair_id),
  decision TEXT NOT NULL CHECK (decision IN {DECISIONS!r}), reason TEXT, created_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS answers_live ON answers (reviewer, pair_id, undone_at);
"""


def check_answer(decision: str, reason: str | None) -> str | None:
    """An accept has no reason; a reject has exactly one of :data:`REJECT_REASONS`."""
    if decision not in DECISIONS:
        raise AuditStoreError(f"decision {decision!r}: must be one of {list(DECISIONS)}")
    if decision == "accept":
        if reason:
            raise AuditStoreError(f"an accepted pair takes no reason (got {reason!r})")
        return None
    if reason not in REJECT_REASONS:
        raise AuditStoreError(f"reject reason {reason!r}: must be one of {list(REJECT_REASONS)}")
    return reason


def _read_table(path: Path) -> pa.Table:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq
        return pq.read_table(path)
    if path.suffix == ".csv":
        import pyarrow.csv as pcsv
        return pcsv.read_csv(path, convert_options=pcsv.ConvertOptions(strings_can_be_null=False))
    if path.suffix in (".jsonl", ".json"):
        import pyarrow.json as pjson
        return pjson.read_json(path)
    raise ValueError(f"proposals {path}: use .parquet, .csv or .jsonl")


def _models(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return sorted({m.strip() for m in value.replace(";", ",").split(",") if m.strip()})
    return sorted({str(m) for m in value})


def load_proposals(path: str | Path) -> list[dict[str, Any]]:
    """Proposed pairs from a table (see the module docstring), checked, in file order."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"proposals table not found: {path}")
    table = _read_table(path)
    missing = [c for c in ("cell", "class_a", "class_b") if c not in table.column_names]
    if missing:
        raise ValueError(f"proposals {path}: missing columns {missing}; has {table.column_names}")
    out: list[dict[str, Any]] = []
    seen_ids: set[str] = set()
    seen_pairs: dict[tuple[str, str, str], str] = {}
    for n, row in enumerate(table.to_pylist()):
        cell, a, b = (str(row[c] or "").strip() for c in ("cell", "class_a", "class_b"))
        where = f"proposals {path} row {n}"
        if cell not in CELLS:
            raise ValueError(f"{where}: cell {cell!r} must be one of {list(CELLS)}")
        if not a or not b or a == b or any(ch in a + b for ch in _BAD_CHARS):
            raise ValueError(f"{where}: classes {a!r}, {b!r} must be two different non-empty names "
                             "without , # tab or newline (the pair-list format)")
        pid = str(row.get("pair_id") or f"{cell}:{a},{b}")
        if pid in seen_ids:
            raise ValueError(f"{where}: pair_id {pid!r} appears twice")
        if (cell, a, b) in seen_pairs:
            raise ValueError(f"{where}: {cell} pair ({a}, {b}) is already {seen_pairs[(cell, a, b)]!r}")
        seen_ids.add(pid)
        seen_pairs[(cell, a, b)] = pid
        out.append({"pair_id": pid, "position": n, "cell": cell, "class_a": a, "class_b": b,
                    "models": _models(row.get("models"))})
    if not out:
        raise ValueError(f"proposals {path}: no rows")
    return out


def _fingerprint(pairs: list[dict[str, Any]]) -> str:
    text = json.dumps([[p["pair_id"], p["cell"], p["class_a"], p["class_b"]] for p in pairs])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class ReviewStore(SqliteStore):
    """One proposals table and its answers in one SQLite file; safe to share across threads."""

    SCHEMA = _SCHEMA

    # -- proposals ----------------------------------------------------------------------------
    def register_pairs(self, pairs: list[dict[str, Any]]) -> None:
        """Load the proposals once; the same table again is a no-op, another one an error."""
        fp = _fingerprint(pairs)
        with self._write() as db:
            old = db.execute("SELECT value FROM meta WHERE key='fingerprint'").fetchone()
            if old is not None:
                if old[0] != fp:
                    raise AuditStoreError(f"{self.path} already holds another proposals table (fingerprint "
                                          f"{old[0]}); use a new database file for this one (fingerprint {fp})")
                return
            db.execute("INSERT INTO meta VALUES ('fingerprint', ?)", (fp,))
            db.executemany("INSERT INTO pairs VALUES (?,?,?,?,?,?)",
                           [(p["pair_id"], p["position"], p["cell"], p["class_a"], p["class_b"],
                             json.dumps(p["models"])) for p in pairs])

    def pairs(self) -> list[dict[str, Any]]:
        return [self._pair(r) for r in self._query("SELECT * FROM pairs ORDER BY position")]

    @staticmethod
    def _pair(row: sqlite3.Row) -> dict[str, Any]:
        return {**dict(row), "models": json.loads(row["models"])}

    def pair(self, pair_id: str) -> dict[str, Any]:
        rows = self._query("SELECT * FROM pairs WHERE pair_id = ?", (pair_id,))
        if not rows:
            raise UnknownItemError(f"pair {pair_id!r} is not in this proposals table")
        return self._pair(rows[0])

    def num_pairs(self) -> int:
        return int(self._query("SELECT COUNT(*) FROM pairs")[0][0])

    # -- answers ------------------------------------------------------------------------------
    def record(self, reviewer: str, pair_id: str, decision: str, reason: str | None = None) -> int:
        """Store one answer in its own committed transaction; returns its row id."""
        reviewer = check_auditor(reviewer)
        reason = check_answer(decision, reason)
        self.pair(pair_id)
        with self._write() as db:
            cur = db.execute("INSERT INTO answers (reviewer, pair_id, decision, reason, created_at) "
                             "VALUES (?,?,?,?,?)", (reviewer, pair_id, decision, reason, time.time()))
            return int(cur.lastrowid)

    def undo(self, reviewer: str) -> str | None:
        """Withdraw the reviewer's latest live answer; returns its pair id (None: nothing to undo)."""
        reviewer = check_auditor(reviewer)
        with self._write() as db:
            row = db.execute("SELECT id, pair_id FROM answers WHERE reviewer=? AND undone_at IS NULL "
                             "ORDER BY id DESC LIMIT 1", (reviewer,)).fetchone()
            if row is None:
                return None
            db.execute("UPDATE answers SET undone_at=? WHERE id=?", (time.time(), row["id"]))
            return str(row["pair_id"])

    def live_answers(self, reviewer: str | None = None) -> list[dict[str, Any]]:
        """Every reviewer's current answer per pair (latest not undone), by reviewer then pair order."""
        sql = """SELECT a.reviewer, a.pair_id, a.decision, a.reason FROM answers a JOIN pairs p USING (pair_id)
          WHERE a.undone_at IS NULL AND a.id = (SELECT MAX(b.id) FROM answers b WHERE b.reviewer = a.reviewer
            AND b.pair_id = a.pair_id AND b.undone_at IS NULL)"""
        args: tuple = ()
        if reviewer is not None:
            sql, args = sql + " AND a.reviewer = ?", (check_auditor(reviewer),)
        return [dict(r) for r in self._query(sql + " ORDER BY a.reviewer, p.position", args)]

    def next_pair(self, reviewer: str) -> dict[str, Any] | None:
        """The first pair in table order the reviewer has no live answer on (None: all done)."""
        rows = self._query(
            "SELECT * FROM pairs p WHERE NOT EXISTS (SELECT 1 FROM answers a WHERE a.pair_id = p.pair_id "
            "AND a.reviewer = ? AND a.undone_at IS NULL) ORDER BY position LIMIT 1", (check_auditor(reviewer),))
        return self._pair(rows[0]) if rows else None

    def progress(self, reviewer: str) -> dict[str, Any]:
        live = self.live_answers(reviewer)
        counts = {d: sum(a["decision"] == d for a in live) for d in DECISIONS}
        return {"reviewer": check_auditor(reviewer), "reviewed": len(live), "total": self.num_pairs(),
                "counts": counts}

    # -- resolutions --------------------------------------------------------------------------
    def resolve(self, resolver: str, pair_id: str, decision: str, reason: str | None = None) -> int:
        """Settle a pair (normally a disagreement) in its own committed transaction; latest counts."""
        resolver = check_auditor(resolver)
        reason = check_answer(decision, reason)
        self.pair(pair_id)
        with self._write() as db:
            cur = db.execute("INSERT INTO resolutions (resolver, pair_id, decision, reason, created_at) "
                             "VALUES (?,?,?,?,?)", (resolver, pair_id, decision, reason, time.time()))
            return int(cur.lastrowid)

    def resolutions(self) -> dict[str, dict[str, Any]]:
        """pair_id -> its latest resolution (resolver, decision, reason)."""
        rows = self._query("SELECT * FROM resolutions ORDER BY id")
        return {r["pair_id"]: {"resolver": r["resolver"], "decision": r["decision"], "reason": r["reason"]}
                for r in rows}



def open_review_store(path: str | Path, pairs: list[dict[str, Any]] | None = None) -> ReviewStore:
    """Open (creating if needed) the store at ``path`` and register ``pairs`` when given."""
    store = ReviewStore(path)
    if pairs is not None:
        store.register_pairs(pairs)
    return store
