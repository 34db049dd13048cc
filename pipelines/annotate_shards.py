"""The on-disk state of an annotation run, one shard at a time (the unit of resume).

A complete shard is three files, the statistics file written last (its presence marks the shard
done)::

    <out_dir>/corpus/<split>/part-NNNNN.parquet        kept relations (CORPUS_SCHEMA); readable images only
    <out_dir>/rejections/<split>/part-NNNNN.parquet    rejected relations and rejected images (REJECTIONS_SCHEMA)
    <out_dir>/stats/shards/<split>-part-NNNNN.json     counters

A shard with VLM calls that failed after their retries is not complete. It is two files instead::

    <out_dir>/failures/<split>/part-NNNNN.parquet      one row per failed call (FAILURES_SCHEMA), for people
    <out_dir>/pending/<split>/part-NNNNN.parquet       every image of the shard as the run left it (JSON
                                                       state; written last: the authority for a rerun)

A rerun annotates only the failed images, from the failed pass on, merges them with the pending
ones and balances the whole shard exactly as an uninterrupted run would. Every file is written
atomically (temporary name, fsync, rename).
"""

from __future__ import annotations

import json
import os
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from pipelines.annotate_stages import merge_counters
from relate.gate import BoxTable, Candidates, GateConfig, balance_relations
from relate.schema import CORPUS_SCHEMA, REJECTIONS_SCHEMA, to_table, validate_corpus, validate_rejections

__all__ = ["FAILURES_SCHEMA", "ShardPaths", "shard_paths", "atomic_write", "balance_shard", "write_shard",
           "load_pending", "read_pending", "write_incomplete", "read_failures", "NOT_RUN"]

FAILURES_SCHEMA = pa.schema([
    pa.field("image_id", pa.string(), nullable=False),
    pa.field("uri", pa.string(), nullable=False),
    pa.field("shard", pa.string(), nullable=False),
    pa.field("pass", pa.string(), nullable=False),
    pa.field("kind", pa.string(), nullable=False),
    pa.field("message", pa.string(), nullable=False),
    pa.field("attempts", pa.int32(), nullable=False),
    pa.field("call_id", pa.string(), nullable=True),  # the judge job's audit call id (annotation: null, one call per image and pass)
])
_PENDING_SCHEMA = pa.schema([pa.field("image_id", pa.string(), nullable=False),
                             pa.field("failed", pa.bool_(), nullable=False),
                             pa.field("row_json", pa.string(), nullable=False)])
NOT_RUN = "not_run"  # failure kind of an image a stopped run never finished


@dataclass(frozen=True)
class ShardPaths:
    kept: Path
    rejected: Path
    stats: Path
    failures: Path
    pending: Path

    def done(self) -> bool:
        return self.kept.exists() and self.rejected.exists() and self.stats.exists()


def shard_paths(out: Path, shard: str) -> ShardPaths:
    split, name = shard.split("/")
    return ShardPaths(out / "corpus" / split / f"{name}.parquet", out / "rejections" / split / f"{name}.parquet",
                      out / "stats" / "shards" / f"{split}-{name}.json", out / "failures" / split / f"{name}.parquet",
                      out / "pending" / split / f"{name}.parquet")


def atomic_write(path: Path, write) -> None:
    """Write to a temporary name in the same folder, fsync, then rename (all or nothing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    write(tmp)
    with open(tmp, "rb") as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def balance_shard(rows: list[dict], shard: str, gate: GateConfig) -> None:
    """Restate with p=1/2, stratified over the whole shard (§4.1), then drop new duplicates.

    Shards are fixed by the plan, so this is as deterministic as the per-image steps, and a
    shard's left/right, above/below and front/behind counts end within one of each other.
    """
    if not gate.balance:
        return
    bt = BoxTable.from_images([r["image_id"] for r in rows], [r["boxes"] for r in rows])
    flat = [(i, rel) for i, r in enumerate(rows) for rel in r["relations"]]
    c = Candidates.from_lists([i for i, _ in flat], [x["subject"] for _, x in flat], [x["object"] for _, x in flat],
                              [x["predicate"] for _, x in flat], [x["pass"] for _, x in flat])
    strata = np.full(len(flat), zlib.crc32(shard.encode()), np.uint64)
    s, o, pred, restated, dup = balance_relations(bt, c, gate, strata)
    for r in rows:
        r["relations"] = []
    for j, (i, rel) in enumerate(flat):
        if dup[j]:
            rows[i]["rejected"].append(dict(subject=rel["subject"], object=rel["object"], predicate=rel["predicate"],
                                            rule="duplicate", **{"pass": rel["pass"]}))
            continue
        if restated[j]:
            rel = dict(rel, subject=int(s[j]), object=int(o[j]), predicate=str(pred[j]), gate="restated")
        rows[i]["relations"].append(rel)


def _failure_rows(shard: str, rows: list[dict]) -> list[dict]:
    out = []
    for r in rows:
        f = json.loads(r["failure_json"])
        out.append(dict(image_id=r["image_id"], uri=r["uri"], shard=shard, kind=f["kind"], message=f.get("message", ""),
                        attempts=int(f.get("attempts", 0)), call_id=None, **{"pass": f["pass"]}))
    return out


def write_shard(out: Path, shard: str, rows: list[dict], gate: GateConfig) -> bool:
    """Write a shard: complete (balanced corpus, rejections, counters) when no row carries a
    failure, else its failures table and pending state. Returns whether the shard is complete."""
    rows = sorted(rows, key=lambda r: r["image_id"])
    paths = shard_paths(out, shard)
    failed = [r for r in rows if r.get("failure_json")]
    if failed:
        write_incomplete(paths.failures, paths.pending, _failure_rows(shard, failed),
                         [(r["image_id"], bool(r.get("failure_json")), {k: v for k, v in r.items() if not isinstance(v, bytes)})
                          for r in rows])
        return False
    readable = [r for r in rows if not r.get("image_error")]
    balance_shard(readable, shard, gate)
    kept = to_table([{k: r.get(k) for k in CORPUS_SCHEMA.names} for r in readable], CORPUS_SCHEMA, table=shard)
    rej = to_table([{"image_id": r["image_id"], "rejected": r["rejected"]} for r in rows], REJECTIONS_SCHEMA, table=shard)
    validate_corpus(kept, name=f"kept {shard}")
    validate_rejections(rej, name=f"rejected {shard}")
    counters: dict = {"images": len(readable)}
    for r in rows:
        counters = merge_counters(counters, json.loads(r["counters_json"]))
    atomic_write(paths.kept, lambda p: pq.write_table(kept, p))
    atomic_write(paths.rejected, lambda p: pq.write_table(rej, p))
    atomic_write(paths.stats, lambda p: p.write_text(json.dumps(counters, sort_keys=True)))  # last: shard complete
    paths.pending.unlink(missing_ok=True)
    paths.failures.unlink(missing_ok=True)
    return True


def write_incomplete(failures: Path, pending: Path, failure_rows: list[dict], state: list[tuple[str, bool, dict]]) -> None:
    """An incomplete shard (the annotation and the judge job alike): its failed calls
    (FAILURES_SCHEMA rows, for people) and its state, one ``(image_id, failed, row)`` per unit of
    work with ``row`` JSON-able; the state is written last and is what a rerun resumes from."""
    fail = pa.Table.from_pylist(failure_rows, schema=FAILURES_SCHEMA)
    table = pa.Table.from_pylist([dict(image_id=i, failed=f, row_json=json.dumps(r)) for i, f, r in state],
                                 schema=_PENDING_SCHEMA)
    atomic_write(failures, lambda p: pq.write_table(fail, p))
    atomic_write(pending, lambda p: pq.write_table(table, p))  # last: what a rerun resumes from


def read_pending(path: Path) -> list[dict] | None:
    """The rows of a pending-state file (None when there is none)."""
    if not Path(path).exists():
        return None
    return [json.loads(s) for s in pq.read_table(path, columns=["row_json"]).column("row_json").to_pylist()]


def load_pending(out: Path, shard: str) -> list[dict] | None:
    """The rows an earlier run left for an incomplete shard (None when it left none)."""
    return read_pending(shard_paths(out, shard).pending)


def _as_failures(t: pa.Table) -> pa.Table:
    for f in FAILURES_SCHEMA:  # files written before a nullable column existed
        if f.name not in t.column_names and f.nullable:
            t = t.append_column(f.name, pa.nulls(t.num_rows, f.type))
    return t.select(FAILURES_SCHEMA.names).cast(FAILURES_SCHEMA)


def read_failures(out: Path, files: list[Path] | None = None) -> pa.Table:
    """Every outstanding failed call of the run (``files``: only those failure files that exist;
    empty table when there is none)."""
    files = sorted((Path(out) / "failures").rglob("*.parquet")) if files is None else [f for f in files if f.exists()]
    if not files:
        return FAILURES_SCHEMA.empty_table()
    return pa.concat_tables([_as_failures(pq.read_table(f)) for f in files])
