"""The annotation job on a local Ray instance: outputs, statistics, skip-on-rerun, kill -9 + resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import ray
from PIL import Image

from pipelines.annotate import AnnotateConfig, annotate_local, main, shard_plan
from relate.config import dump_config
from relate.data.synthetic import SyntheticConfig, make_scene
from relate.schema import CORPUS_SCHEMA, REJECTIONS_SCHEMA, to_table, validate_corpus

ROOT = Path(__file__).resolve().parents[2]


def _world(root: Path, n: int, seed: int = 5) -> Path:
    """A small synthetic corpus in the project layout (images + corpus/<split>/*.parquet)."""
    world = SyntheticConfig(seed=seed)
    rows = {"train": [], "val": []}
    (root / "images").mkdir(parents=True)
    for i in range(n):
        s = make_scene(i, world)
        uri = root / "images" / f"{s.image_id}.png"
        Image.fromarray(s.image).save(uri)
        split = "val" if i % 5 == 0 else "train"
        rows[split].append(dict(image_id=s.image_id, uri=str(uri), width=s.image.shape[1], height=s.image.shape[0],
                                source="synthetic", split=split, boxes=s.boxes,
                                relations=[dict(subject=r["subject"], object=r["object"], predicate=r["predicate"],
                                                **{"pass": "human"}, gate="kept", score=None) for r in s.relations]))
    for split, rs in rows.items():
        (root / "corpus" / split).mkdir(parents=True)
        pq.write_table(to_table(rs, CORPUS_SCHEMA), root / "corpus" / split / "part-0.parquet")
    return root


def _cfg(inp: Path, out: Path, **kw) -> AnnotateConfig:
    base = dict(input_dir=str(inp), out_dir=str(out), splits=["train", "val"], shard_size=6, cpu_batch_size=6,
                duplicate_person_rate=0.2, generate=dict(batch_size=6, resources=dict(num_cpus=0.5)))
    base.update(kw)
    return AnnotateConfig.model_validate(base)


def _read(out: Path, kind: str) -> pa.Table:
    files = sorted((out / kind).rglob("*.parquet"))
    return pa.concat_tables([pq.read_table(f) for f in files]).sort_by("image_id")


@pytest.mark.slow
def test_annotate_writes_shards_stats_and_skips_finished_shards(ray_session, tmp_path, monkeypatch):
    inp = _world(tmp_path / "world", 30)
    cfg = _cfg(inp, tmp_path / "out", generate=dict(batch_size=12, resources=dict(num_cpus=0.5)), cpu_batch_size=12)
    # the driver plans from image ids alone: it reads no record and puts none into the object store
    driver_reads, read_table = [], pq.read_table
    monkeypatch.setattr(pq, "read_table", lambda src, *a, **kw: driver_reads.append((str(src), kw.get("columns")))
                        or read_table(src, *a, **kw))
    monkeypatch.setattr(ray.data, "from_arrow", lambda *a, **kw: pytest.fail("the driver put records into the store"))
    # the run's object-store budget bounds how far reading runs ahead of the annotator, on this
    # run's dataset only (a process-wide limit would throttle every other dataset of a notebook)
    budgets, iter_batches = [], ray.data.Dataset.iter_batches
    monkeypatch.setattr(ray.data.Dataset, "iter_batches", lambda self, *a, **kw: budgets.append(
        self.context.execution_options.resource_limits.object_store_memory) or iter_batches(self, *a, **kw))
    res = main(cfg)
    monkeypatch.undo()
    assert budgets == [cfg.in_flight_mb * 1024 * 1024] and cfg.in_flight_mb == 32
    assert ray.data.DataContext.get_current().execution_options.resource_limits.object_store_memory == float("inf")
    inputs = [c for src, c in driver_reads if src.startswith(str(inp))]
    assert len(inputs) == 2 and all(c == ["image_id"] for c in inputs), driver_reads  # one file per split
    kept, rej = _read(Path(cfg.out_dir), "corpus"), _read(Path(cfg.out_dir), "rejections")
    assert kept.num_rows == rej.num_rows == 30 and kept.schema.equals(CORPUS_SCHEMA)
    assert rej.schema.equals(REJECTIONS_SCHEMA)
    validate_corpus(kept)
    names = sorted(p.relative_to(cfg.out_dir).as_posix() for p in Path(cfg.out_dir).rglob("*.parquet"))
    assert names[0] == "corpus/train/part-00000.parquet" and "rejections/val/part-00000.parquet" in names
    stats = json.loads((Path(cfg.out_dir) / "stats" / "annotation_stats.json").read_text())
    assert stats["images"] == 30 and stats["relations"] > 100 and stats["rejections_per_rule"]
    assert set(stats["pass_share"]) <= {"semantic", "grow", "spatial", "topup"}
    n_shards = len(set(shard_plan(cfg).column("shard").to_pylist()))
    assert n_shards == 5  # 24 train images in shards of 6, 6 val images in one
    assert res.shards_written == n_shards and res.shards_skipped == 0
    again = main(cfg)
    assert again.shards_written == 0 and again.shards_skipped == n_shards and again.stats == res.stats


@pytest.mark.slow
def test_kill_dash_nine_then_resume_equals_an_uninterrupted_run(ray_session, tmp_path):
    inp = _world(tmp_path / "world", 36)
    ref_cfg = _cfg(inp, tmp_path / "reference")
    annotate_local(shard_plan(ref_cfg), ref_cfg, ref_cfg.out_dir)  # uninterrupted, and without Ray at all

    slow = _cfg(inp, tmp_path / "crashed", vlm=dict(scripted=dict(delay_s=0.12)))
    cfg_file = tmp_path / "crashed.yaml"
    dump_config(slow, cfg_file)
    env = dict(os.environ, RAY_ADDRESS=ray_session.get_runtime_context().gcs_address, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "pipelines.annotate", "--config", str(cfg_file)], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    done_dir = Path(slow.out_dir) / "stats" / "shards"
    deadline = time.time() + 300  # generous: a loaded 2-core machine starts a driver slowly
    while time.time() < deadline and not (done_dir.is_dir() and any(done_dir.glob("*.json"))):
        assert proc.poll() is None, "driver exited before it could be killed"
        time.sleep(0.2)
    os.kill(proc.pid, signal.SIGKILL)  # the driver dies mid-run, no cleanup
    proc.wait(timeout=30)
    finished = len(list(done_dir.glob("*.json")))
    n_shards = len(set(shard_plan(slow).column("shard").to_pylist()))
    assert 1 <= finished < n_shards, f"kill came too late or too early ({finished} of {n_shards} shards done)"

    resumed = main(slow.model_copy(update={"vlm": ref_cfg.vlm}))
    assert resumed.shards_skipped == finished and resumed.shards_written == n_shards - finished
    for kind in ("corpus", "rejections"):
        a, b = _read(Path(ref_cfg.out_dir), kind), _read(Path(slow.out_dir), kind)
        assert a.num_rows == 36 and a.equals(b), kind  # nothing lost, nothing duplicated, same decisions
    assert not [p for p in Path(slow.out_dir).rglob("*") if ".tmp-" in p.name]  # the killed driver's temporaries are gone
