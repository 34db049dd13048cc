"""SQLite verdict store: durability, undo, auditors kept apart, bad input named."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap

import pytest

from relate.audit.sampler import AuditSampleConfig, sample_audit_batch, write_audit_batch
from relate.audit.store import AuditStoreError, UnknownItemError, open_verdict_store
from relate.schema import CORPUS_SCHEMA, to_table

_BOX = dict(x1=1.0, y1=1.0, x2=5.0, y2=5.0, category="thing", is_person=False, is_body_part=False)


def _batch(preds=("left of", "holding", "on", "near", "behind"), per_stratum=2, n_images=3):
    rels = [[{"subject": 0, "object": 1, "predicate": p, "pass": "semantic", "gate": "kept", "score": None}
             for p in preds] for _ in range(n_images)]
    rows = [dict(image_id=f"im{i}", uri=f"/x/{i}.png", width=9, height=9, source="t", split="train",
                 boxes=[_BOX, _BOX], relations=r) for i, r in enumerate(rels)]
    return sample_audit_batch(to_table(rows, CORPUS_SCHEMA), AuditSampleConfig(per_stratum=per_stratum))


def test_record_next_progress_and_undo(tmp_path):
    batch = _batch()
    store = open_verdict_store(tmp_path / "v.db", batch)
    items = [it["item_id"] for it in store.items()]
    assert items == batch.items.column("item_id").to_pylist() and len(items) == 10
    assert store.next_item("ann")["item_id"] == items[0]
    store.record("ann", items[0], "true")
    store.record("ann", items[1], "false")
    store.record("ann", items[2], "unsure")
    assert store.next_item("ann")["item_id"] == items[3]
    assert store.progress("ann") == {"auditor": "ann", "judged": 3, "total": 10,
                                     "counts": {"true": 1, "false": 1, "unsure": 1}}
    assert store.undo("ann") == items[2]
    assert store.next_item("ann")["item_id"] == items[2]
    # A changed mind: the later verdict wins; undo brings the earlier one back.
    store.record("ann", items[0], "false")
    assert ("ann", items[0], "false") in store.live_verdicts("ann")
    assert store.undo("ann") == items[0]
    assert store.live_verdicts("ann") == [("ann", items[0], "true"), ("ann", items[1], "false")]
    assert store.undo("ann") == items[1] and store.undo("ann") == items[0] and store.undo("ann") is None
    history = list(store.history())
    assert len(history) == 4 and all(h["undone_at"] is not None for h in history)  # nothing deleted


def test_auditors_are_kept_apart(tmp_path):
    store = open_verdict_store(tmp_path / "v.db", _batch())
    a, b = [it["item_id"] for it in store.items()[:2]]
    store.record("ann", a, "true")
    store.record("bob", a, "false")
    store.record("bob", b, "true")
    assert store.undo("ann") == a                       # ann's undo never touches bob's verdicts
    assert store.live_verdicts() == [("bob", a, "false"), ("bob", b, "true")]
    assert store.auditors() == ["ann", "bob"]
    assert store.next_item("ann")["item_id"] == a and store.progress("bob")["judged"] == 2


def test_verdicts_survive_a_killed_writer(tmp_path):
    """A separate process records verdicts and dies without closing anything: all are there."""
    batch = _batch()
    bpath = write_audit_batch(batch, tmp_path / "b.json")
    db = tmp_path / "v.db"
    items = batch.items.column("item_id").to_pylist()
    code = textwrap.dedent(f"""
        import os
        from relate.audit.sampler import load_audit_batch
        from relate.audit.store import open_verdict_store
        s = open_verdict_store({str(db)!r}, load_audit_batch({str(bpath)!r}))
        for i, v in zip({items[:4]!r}, ["true", "false", "true", "unsure"]):
            s.record("ann", i, v)
        s.undo("ann")
        os._exit(0)
    """)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    store = open_verdict_store(db, batch)  # same batch again: accepted, nothing duplicated
    assert len(store.items()) == len(items)
    assert store.live_verdicts() == [("ann", items[0], "true"), ("ann", items[1], "false"), ("ann", items[2], "true")]
    raw = sqlite3.connect(db)
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert raw.execute("SELECT COUNT(*) FROM verdicts").fetchone()[0] == 4


def test_bad_input_is_named(tmp_path):
    store = open_verdict_store(tmp_path / "v.db", _batch())
    item = store.items()[0]["item_id"]
    with pytest.raises(AuditStoreError, match="verdict 'yes'"):
        store.record("ann", item, "yes")
    with pytest.raises(UnknownItemError, match="'nope' is not in this audit batch"):
        store.record("ann", "nope", "true")
    for bad in ("", "   ", "-x", "a" * 65, "ann; drop"):
        with pytest.raises(AuditStoreError, match="auditor name"):
            store.record(bad, item, "true")
    assert store.record("  ann  ", item, "true") > 0 and store.auditors() == ["ann"]
    with pytest.raises(AuditStoreError, match="already holds another audit batch"):
        store.register_batch(_batch(preds=("left of", "holding")))
    with pytest.raises(AuditStoreError, match="no audit batch"):
        open_verdict_store(tmp_path / "empty.db").batch_meta()
