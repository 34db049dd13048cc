"""eval_jobs.convert --score under sgb in Ray tasks: row groups scored in parallel give the same
totals and per-image rows as one process reading them in order."""

from __future__ import annotations

import json
import sys

import pyarrow.parquet as pq
import pytest

from _sgb_files import SGB_MODULES, boxlist_module, random_boxlists
from eval_jobs.convert import ConvertConfig, main
from relate.schema import CORPUS_SCHEMA, to_table

pytestmark = pytest.mark.ray


def test_ray_workers_score_as_one_process(ray_session, tmp_path, monkeypatch):
    import torch

    BoxList = boxlist_module(monkeypatch)
    boxes = random_boxlists(BoxList, 12, 1)
    torch.save(boxes, tmp_path / "eval_results.pytorch")
    shards = tmp_path / "shards"
    shards.mkdir()
    for k in range(3):
        torch.save(boxes[4 * k:4 * k + 4], shards / f"part_{k}.pytorch")
    for name in SGB_MODULES:
        monkeypatch.delitem(sys.modules, name)
    dicts = tmp_path / "dicts.json"
    dicts.write_text(json.dumps({"idx_to_label": {"1": "man", "2": "horse"}, "idx_to_predicate": {"1": "on", "2": "near"}}))
    box = lambda *b: {"x1": b[0], "y1": b[1], "x2": b[2], "y2": b[3], "category": b[4], "is_person": False,  # noqa: E731
                      "is_body_part": False}
    rel = lambda s, o, p: {"subject": s, "object": o, "predicate": p, "pass": "human", "gate": "kept", "score": None}  # noqa: E731
    rows = [{"image_id": f"I{i}", "uri": "mem://x", "width": 100, "height": 100, "source": "t", "split": "test",
             "boxes": [box(0, 0, 9, 9, "man"), box(20, 20, 29, 29, "horse")],
             "relations": [rel(0, 1, ("on", "near")[i % 2]), rel(1, 0, "near")]} for i in range(12)]
    corpus = tmp_path / "c.parquet"
    pq.write_table(to_table(rows, CORPUS_SCHEMA), corpus)
    res = {}
    for workers in (0, 3):
        res[workers] = main(ConvertConfig(source_format="sgb", input=str(tmp_path / "eval_results.pytorch"),
                                          dicts=str(dicts), benchmark_reader="parquet", benchmark_path=str(corpus),
                                          out=str(tmp_path / f"w{workers}.parquet"), score=True, ks=[1, 2, 20],
                                          chunk_scores=40, score_workers=workers))  # 2-4 images a row group
    assert pq.ParquetFile(res[3]["out"]).num_row_groups >= 3
    for mode in ("graph_constrained", "unconstrained"):
        assert res[0]["scores"][mode] == res[3]["scores"][mode]
    a, b = (pq.read_table(res[w]["scores"]["per_image"]).drop(["system"]) for w in (0, 3))
    assert a.num_rows > 0 and a.equals(b)
    # --only-score in a process connected to Ray does not fork readers (a forked Ray driver is
    # unsafe): the shards are read here, with the same totals
    only = main(ConvertConfig(source_format="sgb", input=str(shards), dicts=str(dicts), benchmark_reader="parquet",
                              benchmark_path=str(corpus), out=str(tmp_path / "only.parquet"), score=True, ks=[1, 2, 20],
                              only_score=True, read_workers=3))
    assert only["read_workers"] == 1 and only["images"] == 12
    for mode in ("graph_constrained", "unconstrained"):
        assert only["scores"][mode] == res[0]["scores"][mode]
