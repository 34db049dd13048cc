"""Balancing and writing in Ray tasks, one per shard, so the annotation driver only plans and commits.

The last stage of the graph (:class:`SpoolStage`, fused with the gate in the same Ray task)
writes each batch's finished rows to the shard's spool folder and sends the driver one small
summary row per (batch, shard): the shard, how many images, this run's VLM counters and the
kinds of the calls that failed after their retries (read by :class:`RunTally`). When a shard's
images are all spooled, the driver starts :func:`finish_shard` as a Ray task: it
reads the spool (plus the images an earlier run finished, from ``pending/``), balances the
shard and writes it exactly as :func:`pipelines.annotate_shards.write_shard` always has, then
drops the spool. Shard membership and every decision are fixed by the plan and the image, so
this is as deterministic as the driver-side writer it replaces; no image row crosses the driver.

Spool files are scratch of one run (``<out_dir>/spool/<split>/<part>/<hash>.parquet``, renamed
into place): a run starts by deleting any left by a killed one, which the rerun reproduces.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Mapping

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipelines.annotate_shards import NOT_RUN, load_pending, write_shard
from pipelines.annotate_stages import PASS_ORDER, merge_counters
from relate.annotation_stats import vlm_call_stats
from relate.gate import GateConfig

__all__ = ["SpoolStage", "SUMMARY_SCHEMA", "RunTally", "spool_root", "spool_dir", "spooled_rows", "finish_shard"]

SUMMARY_SCHEMA = pa.schema([pa.field("shard", pa.string()), pa.field("images", pa.int64()),
                            pa.field("run_vlm_json", pa.string()), pa.field("failures_json", pa.string())])


def spool_root(out: Path) -> Path:
    return Path(out) / "spool"


def spool_dir(out: Path, shard: str) -> Path:
    return spool_root(out) / shard  # shard = "<split>/part-NNNNN"


class SpoolStage:
    """Write each batch's rows per shard to the spool; return one summary row per shard."""

    def __init__(self, out_dir: str) -> None:
        self.out = Path(out_dir)

    def __call__(self, batch: pa.Table) -> pa.Table:
        shards = batch.column("shard")
        rows = {"shard": [], "images": [], "run_vlm_json": [], "failures_json": []}
        for s in sorted(set(shards.to_pylist())):
            part = batch.filter(pc.equal(shards, s))
            ids = part.column("image_id").to_pylist()
            name = hashlib.sha1("\n".join(ids).encode()).hexdigest()[:20]  # same rows, same name (a retried task overwrites)
            path = spool_dir(self.out, s) / f"{name}.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
            pq.write_table(part, tmp)
            os.replace(tmp, path)  # readers see whole files only
            vlm: dict = {}
            if "run_vlm_json" in part.column_names:
                for v in part.column("run_vlm_json").to_pylist():
                    vlm = merge_counters(vlm, json.loads(v or "{}"))
            # a row carrying a failure is one row of the shard's failures table (write_shard): counting
            # them here gives the driver, during the run, the count the final statistics read from disk
            failed: dict[str, int] = {}
            if "failure_json" in part.column_names:
                for f in part.column("failure_json").to_pylist():
                    if f:
                        kind = json.loads(f)["kind"]
                        failed[kind] = failed.get(kind, 0) + 1
            rows["shard"].append(s)
            rows["images"].append(len(ids))
            rows["run_vlm_json"].append(json.dumps(vlm))
            rows["failures_json"].append(json.dumps(failed))
        return pa.table(rows, schema=SUMMARY_SCHEMA)


class RunTally:
    """What the driver knows of a running job, from the summary rows alone: images back per
    shard, this run's VLM counters, and the failed calls still outstanding by kind."""

    def __init__(self, expected: Mapping[str, int]) -> None:
        self.expected = dict(expected)  # shard -> images this run annotates in it
        self.got: dict[str, int] = {}
        self.counters: dict = {}  # this run's VLM counters (merge_counters form)
        self.outstanding: dict[str, int] = {}

    @property
    def images(self) -> int:
        return sum(self.got.values())

    def add(self, batch: pa.Table) -> list[str]:
        """Count a batch of summary rows; returns the shards whose images are now all back."""
        full = []
        for s, n, v, f in zip(batch.column("shard").to_pylist(), batch.column("images").to_pylist(),
                              batch.column("run_vlm_json").to_pylist(), batch.column("failures_json").to_pylist()):
            self.got[s] = self.got.get(s, 0) + n
            self.counters = merge_counters(self.counters, json.loads(v))
            for kind, k in json.loads(f or "{}").items():
                self.outstanding[kind] = self.outstanding.get(kind, 0) + k
            if self.got[s] == self.expected[s]:
                full.append(s)
        return full

    def vlm(self) -> dict:
        """:func:`relate.annotation_stats.vlm_call_stats` of this run so far, failures outstanding included."""
        return vlm_call_stats({"vlm": self.counters}, self.outstanding)


def spooled_rows(out: Path, shard: str) -> dict[str, dict]:
    """The rows this run spooled for ``shard``, by image id."""
    rows: dict[str, dict] = {}
    d = spool_dir(out, shard)
    for f in sorted(d.glob("*.parquet")) if d.is_dir() else []:
        for r in pq.read_table(f).to_pylist():
            rows[r["image_id"]] = r
    return rows


def finish_shard(out: str | Path, shard: str, gate: GateConfig, expected: int,
                 missing_from: list[dict] | None = None) -> bool:
    """Balance and write ``shard`` from its spool and the images an earlier run finished; returns
    whether the shard is complete (see :func:`write_shard`).

    ``expected``: images this run annotates in the shard; fewer in the spool is an error, unless
    ``missing_from`` (the shard's work rows, when a stopping run saves what it has) is given:
    then each image not spooled is kept as a ``not_run`` failure, so a rerun annotates it.
    """
    out = Path(out)
    new = spooled_rows(out, shard)
    if missing_from is None and len(new) != expected:
        raise RuntimeError(f"shard {shard}: {len(new)} of {expected} images in {spool_dir(out, shard)}; "
                           f"the spool lost rows (rerun the same command to annotate the shard again)")
    rows = list(new.values())
    for r in missing_from or []:
        if r["image_id"] not in new:
            rows.append(dict(r, failure_json=json.dumps({
                "pass": PASS_ORDER[r["resume_from"]], "kind": NOT_RUN, "attempts": r["attempts_before"],
                "message": "the run stopped before this image was annotated"})))
    carried = [r for r in load_pending(out, shard) or [] if not r.get("failure_json") and r["image_id"] not in new]
    complete = write_shard(out, shard, carried + rows, gate)
    shutil.rmtree(spool_dir(out, shard), ignore_errors=True)
    return complete
