"""The annotation driver's plan: shards from image ids alone, the same as the record plan."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from pipelines.annotate import AnnotateConfig, _input_files, _read_work, _work, plan_shards, shard_plan
from pipelines.annotate_shards import write_incomplete, shard_paths
from relate.data.synthetic import SyntheticConfig, make_scene
from relate.schema import CORPUS_SCHEMA, to_table


def _corpus(root: Path, n: int) -> Path:
    """``n`` records of the train split in two files, neither in id order (nor the two in sequence)."""
    world = SyntheticConfig(seed=3)
    rows = [make_scene(i, world).to_record(f"img{i}.png", "train") for i in range(n)]
    rows = rows[::-1]
    (root / "corpus" / "train").mkdir(parents=True)
    pq.write_table(to_table(rows[::2], CORPUS_SCHEMA), root / "corpus" / "train" / "part-0.parquet")
    pq.write_table(to_table(rows[1::2], CORPUS_SCHEMA).drop_columns(["relations", "width"]),
                   root / "corpus" / "train" / "part-1.parquet")
    return root


def test_plan_reads_only_ids_and_cuts_the_shards_of_the_record_plan(tmp_path, monkeypatch):
    inp = _corpus(tmp_path / "in", 23)
    for kw in ({}, {"limit": 9}):
        cfg = AnnotateConfig(input_dir=str(inp), out_dir=str(tmp_path / "out"), splits=["train"], shard_size=4, **kw)
        records = shard_plan(cfg)
        reads, read_table = [], pq.read_table
        monkeypatch.setattr(pq, "read_table", lambda src, *a, **k: reads.append(k.get("columns")) or read_table(src, *a, **k))
        plan = plan_shards(cfg, _input_files(cfg, tmp_path / "scratch"))
        monkeypatch.undo()
        assert reads == [["image_id"], ["image_id"]]  # no record is read by the planning driver
        (sp,) = plan.splits
        assert len(sp.starts) == len(sp.sizes) == len(set(records.column("shard").to_pylist()))  # O(shards), not O(records)
        assert sp.shards_of(records.column("image_id").to_pylist()) == records.column("shard").to_pylist()
        work = _work(cfg, plan)
        rows = _read_work(work.stages, set(plan.sizes))  # what the Ray Data read tasks produce, file by file
        got = sorted((r["image_id"], r["shard"], len(r["boxes"]), len(r["reference"])) for v in rows.values() for r in v)
        assert got == sorted(zip(records.column("image_id").to_pylist(), records.column("shard").to_pylist(),
                                 [len(b) for b in records.column("boxes").to_pylist()],
                                 [len(b) for b in records.column("reference").to_pylist()]))
        assert work.expected == dict(sorted(plan.sizes.items()))


def test_work_skips_done_shards_and_resumes_failed_images_only(tmp_path):
    inp = _corpus(tmp_path / "in", 12)
    cfg = AnnotateConfig(input_dir=str(inp), out_dir=str(tmp_path / "out"), splits=["train"], shard_size=4)
    records = shard_plan(cfg).to_pylist()
    out = Path(cfg.out_dir)
    done = shard_paths(out, "train/part-00000")
    for f in (done.kept, done.rejected, done.stats):
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("{}")
    part1 = [r for r in records if r["shard"] == "train/part-00001"]
    failed = dict(part1[2], failure_json=json.dumps({"pass": "grow", "kind": "http_503", "attempts": 3}),
                  cands_json="[1]", counters_json='{"vlm": {}}', reference=[], boxes=[])
    state = [(r["image_id"], False, dict(r, reference=[], boxes=[])) for r in part1 if r is not part1[2]]
    p = shard_paths(out, "train/part-00001")
    write_incomplete(p.failures, p.pending, [], state + [(failed["image_id"], True, failed)])
    work = _work(cfg, plan_shards(cfg, _input_files(cfg, tmp_path / "scratch")))
    assert work.done_before == 1 and work.carried == 3
    assert work.expected == {"train/part-00001": 1, "train/part-00002": 4}
    rows = _read_work(work.stages, {"train/part-00000", "train/part-00001", "train/part-00002"})
    assert "train/part-00000" not in rows
    (again,) = rows["train/part-00001"]
    assert again["image_id"] == failed["image_id"] and again["resume_from"] == 1 and again["attempts_before"] == 3
    assert again["cands_json"] == "[1]" and len(again["boxes"]) == len(part1[2]["boxes"])  # the record, from the input
    assert all(r["resume_from"] == 0 for r in rows["train/part-00002"])


def test_read_tasks_cover_each_record_once_in_slices_and_mark_them_in_the_task(tmp_path):
    """A row group larger than ``read_rows`` is read in slices, each record by exactly one read
    task, and the marker stage runs in the same task on blocks of ``rows_per_block`` (so records
    never wait between reading and marking, where Ray would keep them in the driver's heap)."""
    import pyarrow as pa

    from pipelines.annotate import ReadStage, read_units

    inp = _corpus(tmp_path / "in", 23)  # part-0: 12 records, part-1: 11, one row group each
    pq.write_table(pq.read_table(inp / "corpus" / "train" / "part-0.parquet"), inp / "corpus" / "train" / "part-0.parquet",
                   row_group_size=7)  # groups of 7 and 5
    cfg = AnnotateConfig(input_dir=str(inp), out_dir=str(tmp_path / "out"), splits=["train"], shard_size=4)
    work = _work(cfg, plan_shards(cfg, _input_files(cfg, tmp_path / "scratch")))
    units = read_units(work.stages, read_rows=3)
    spans = sorted((Path(u["path"]).name, u["row_group"], u["start"], u["stop"]) for u in units)
    assert spans == [("part-0.parquet", 0, 0, 3), ("part-0.parquet", 0, 3, 6), ("part-0.parquet", 0, 6, 7),
                     ("part-0.parquet", 1, 0, 3), ("part-0.parquet", 1, 3, 5),
                     ("part-1.parquet", 0, 0, 3), ("part-1.parquet", 0, 3, 6), ("part-1.parquet", 0, 6, 9),
                     ("part-1.parquet", 0, 9, 11)]
    calls = []

    def mark(t: pa.Table) -> pa.Table:
        calls.append(t.num_rows)
        return t.append_column("marked", pa.array([True] * t.num_rows))

    read = ReadStage(work.stages, rows_per_block=2, mark=mark)
    blocks = [b for u in units for b in read(pa.Table.from_pylist([u]))]
    ids = [i for b in blocks for i in b.column("image_id").to_pylist()]
    expected = _read_work(work.stages, set(work.expected))
    assert sorted(ids) == sorted(r["image_id"] for v in expected.values() for r in v)  # every record once
    assert all(b.column("marked").to_pylist() == [True] * b.num_rows for b in blocks)
    assert calls == [b.num_rows for b in blocks] and max(calls) == 2  # marked in the task, two rows at a time
