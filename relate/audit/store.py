"""Durable verdict store for the human audit (SQLite in WAL mode).

Every verdict is its own committed transaction (``synchronous=FULL``), so a closed browser, a
killed server or a power cut loses at most the click in flight. Rows are never deleted: undo marks
the auditor's latest live verdict as undone, which keeps a full history for later questions
("how often did people change their mind?"). Verdicts are keyed by auditor name, so two people on
the same batch never overwrite each other and their agreement can be measured.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from relate.audit.sampler import AuditBatch

__all__ = ["VERDICTS", "SqliteStore", "VerdictStore", "AuditStoreError", "UnknownItemError", "open_verdict_store", "check_auditor"]

VERDICTS = ("true", "false", "unsure")
_ITEM_COLS = ("item_id", "position", "image_id", "rel_index", "subject", "object", "predicate",
              "pass", "gate", "family", "bucket", "stratum")
_AUDITOR_RE = re.compile(r"^[\w][\w .@+-]{0,63}$")
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS items (
  item_id TEXT PRIMARY KEY, position INTEGER NOT NULL UNIQUE, image_id TEXT NOT NULL,
  rel_index INTEGER NOT NULL, subject INTEGER NOT NULL, object INTEGER NOT NULL,
  predicate TEXT NOT NULL, pass TEXT NOT NULL, gate TEXT NOT NULL, family TEXT NOT NULL,
  bucket TEXT NOT NULL, stratum TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS verdicts (
  id INTEGER PRIMARY KEY AUTOINCREMENT, auditor TEXT NOT NULL,
  item_id TEXT NOT NULL REFERENCES items(item_id),
  verdict TEXT NOT NULL CHECK (verdict IN {VERDICTS!r}),
  created_at REAL NOT NULL, undone_at REAL);
CREATE INDEX IF NOT EXISTS verdicts_live ON verdicts (auditor, item_id, undone_at);
"""
# The auditor's current verdict on an item is their latest row that has not been undone.
_LIVE = """SELECT v.auditor, v.item_id, v.verdict FROM verdicts v
  WHERE v.undone_at IS NULL AND v.id = (SELECT MAX(w.id) FROM verdicts w
    WHERE w.auditor = v.auditor AND w.item_id = v.item_id AND w.undone_at IS NULL)"""


class AuditStoreError(ValueError):
    """Bad input to the store (unknown item, bad verdict or name, a different batch)."""


class UnknownItemError(AuditStoreError):
    """An item id that is not in the registered batch."""


def check_auditor(name: str) -> str:
    """Names are identities: stripped, 1-64 characters of letters, digits, space and ``.@+-_``."""
    if not isinstance(name, str) or not _AUDITOR_RE.match(name.strip()):
        raise AuditStoreError(f"auditor name {name!r}: use 1-64 letters, digits, spaces or . @ + - _ "
                              "(starting with a letter or digit)")
    return name.strip()


class SqliteStore:
    """One SQLite file in WAL mode with synchronous commits, safe to share across threads and
    processes: one committed transaction per write, so nothing written is lost in a crash. The
    verdict store and the review store (relate.audit.review_store) are both built on it."""

    SCHEMA = ""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        # isolation_level=None: we issue BEGIN/COMMIT ourselves, one transaction per write.
        self._conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30.0)
        self._conn.row_factory = sqlite3.Row
        mode = self._conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise AuditStoreError(f"{self.path}: SQLite refused WAL mode (got {mode!r})")
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.execute("PRAGMA foreign_keys=ON")
        self._conn.executescript(self.SCHEMA)

    # -- transactions -------------------------------------------------------------------------
    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")  # take the write lock now, not at first write
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def _query(self, sql: str, args: tuple = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._conn.execute(sql, args).fetchall()

    def close(self) -> None:
        with self._lock:
            self._conn.close()


class VerdictStore(SqliteStore):
    """One batch and its verdicts in one SQLite file; safe to share across threads and processes."""

    SCHEMA = _SCHEMA

    # -- batch --------------------------------------------------------------------------------
    def register_batch(self, batch: AuditBatch) -> None:
        """Load the batch once; re-registering the same batch is a no-op, a different one an error."""
        meta = json.dumps(batch.meta, sort_keys=True)
        ids = batch.items.column("item_id").to_pylist()
        with self._write() as db:
            old = db.execute("SELECT value FROM meta WHERE key='batch'").fetchone()
            if old is not None:
                have = json.loads(old[0])
                have_ids = {r[0] for r in db.execute("SELECT item_id FROM items")}
                n_have = len(have_ids)
                same = have["fingerprint"] == batch.fingerprint and have_ids == set(ids)
                if not same:
                    raise AuditStoreError(
                        f"{self.path} already holds another audit batch (fingerprint {have['fingerprint']}, "
                        f"{n_have} items); use a new database file for this batch "
                        f"(fingerprint {batch.fingerprint}, {len(ids)} items)")
                return
            db.execute("INSERT INTO meta VALUES ('batch', ?)", (meta,))
            db.executemany(f"INSERT INTO items ({','.join(_ITEM_COLS)}) VALUES ({','.join('?' * len(_ITEM_COLS))})",
                           [tuple(r[c] for c in _ITEM_COLS) for r in batch.items.to_pylist()])

    def batch_meta(self) -> dict[str, Any]:
        rows = self._query("SELECT value FROM meta WHERE key='batch'")
        if not rows:
            raise AuditStoreError(f"{self.path}: no audit batch registered yet")
        return json.loads(rows[0][0])

    def items(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self._query("SELECT * FROM items ORDER BY position")]

    def num_items(self) -> int:
        return int(self._query("SELECT COUNT(*) FROM items")[0][0])

    def item(self, item_id: str) -> dict[str, Any]:
        rows = self._query("SELECT * FROM items WHERE item_id = ?", (item_id,))
        if not rows:
            raise UnknownItemError(f"item {item_id!r} is not in this audit batch")
        return dict(rows[0])

    # -- verdicts -----------------------------------------------------------------------------
    def record(self, auditor: str, item_id: str, verdict: str) -> int:
        """Store one verdict in its own committed transaction; returns its row id."""
        auditor = check_auditor(auditor)
        if verdict not in VERDICTS:
            raise AuditStoreError(f"verdict {verdict!r}: must be one of {list(VERDICTS)}")
        self.item(item_id)
        with self._write() as db:
            cur = db.execute("INSERT INTO verdicts (auditor, item_id, verdict, created_at) VALUES (?,?,?,?)",
                             (auditor, item_id, verdict, time.time()))
            return int(cur.lastrowid)

    def undo(self, auditor: str) -> str | None:
        """Withdraw the auditor's latest live verdict; returns its item id (None: nothing to undo)."""
        auditor = check_auditor(auditor)
        with self._write() as db:
            row = db.execute("SELECT id, item_id FROM verdicts WHERE auditor=? AND undone_at IS NULL "
                             "ORDER BY id DESC LIMIT 1", (auditor,)).fetchone()
            if row is None:
                return None
            db.execute("UPDATE verdicts SET undone_at=? WHERE id=?", (time.time(), row["id"]))
            return str(row["item_id"])

    def live_verdicts(self, auditor: str | None = None) -> list[tuple[str, str, str]]:
        """(auditor, item_id, verdict) for every current verdict, in batch order."""
        sql = f"SELECT l.* FROM ({_LIVE}) l JOIN items i USING (item_id)"
        args: tuple = ()
        if auditor is not None:
            sql, args = sql + " WHERE l.auditor = ?", (check_auditor(auditor),)
        rows = self._query(sql + " ORDER BY l.auditor, i.position", args)
        return [(r["auditor"], r["item_id"], r["verdict"]) for r in rows]

    def history(self) -> Iterator[dict[str, Any]]:
        yield from (dict(r) for r in self._query("SELECT * FROM verdicts ORDER BY id"))

    def auditors(self) -> list[str]:
        return [r[0] for r in self._query("SELECT DISTINCT auditor FROM verdicts ORDER BY auditor")]

    def next_item(self, auditor: str) -> dict[str, Any] | None:
        """The first item in batch order the auditor has no live verdict on (None: all done)."""
        auditor = check_auditor(auditor)
        rows = self._query(
            "SELECT * FROM items i WHERE NOT EXISTS (SELECT 1 FROM verdicts v WHERE v.item_id = i.item_id "
            "AND v.auditor = ? AND v.undone_at IS NULL) ORDER BY position LIMIT 1", (auditor,))
        return dict(rows[0]) if rows else None

    def progress(self, auditor: str) -> dict[str, Any]:
        live = self.live_verdicts(auditor)
        counts = {v: sum(1 for *_, x in live if x == v) for v in VERDICTS}
        return {"auditor": check_auditor(auditor), "judged": len(live), "total": self.num_items(), "counts": counts}



def open_verdict_store(path: str | Path, batch: AuditBatch | None = None) -> VerdictStore:
    """Open (creating if needed) the store at ``path`` and register ``batch`` when given."""
    store = VerdictStore(path)
    if batch is not None:
        store.register_batch(batch)
    return store
