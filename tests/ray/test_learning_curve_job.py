"""train_jobs.learning_curve end to end on a local Ray instance: two sources on the same images (the
world's full truth and its stated relations) trained at once, each from its own Ray task, with a
third whose corpus cannot be read failing beside them; a tiny model, two checkpoints per run scored
on the validation split, the final ones once on the whole test split with intervals; then a rerun
that trains and scores nothing (the kept scores and report cells are reused)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow]

TINY = ["model.backbone.img_size=32", "model.backbone.depth=2", "model.backbone.taps=[-2, -1]", "model.dim=32",
        "model.scene_grid=2", "model.sampler.geometry_keep=24", "model.sampler.learned_keep=12", "data.rungs=[1.0]",
        "optim.batch_size=4", "optim.warmup_steps=1", "run.val_images=4", "run.log_every=100",
        "run.num_workers=1", "run.worker.num_cpus=0.5", "data.max_relations=128"]


@pytest.fixture(scope="module")
def worlds(tmp_path_factory):
    from relate.config import dump_config
    from relate.data.synthetic import SyntheticConfig
    from relate.data.synthetic_corpus import write_corpus

    out = {}
    for name, coverage in (("stated", "stated"), ("full", "full")):
        world = SyntheticConfig(num_scenes=30, min_size=64, max_size=96, max_objects=5, coverage=coverage)
        root = write_corpus(tmp_path_factory.mktemp(name), world, lambda i: ("test", "val", "train", "train")[i % 4])
        dump_config(world, root / "synthetic_config.yaml")
        out[name] = root
    return out


def test_curves_for_two_sources_and_kept_scores(ray_session, worlds, tmp_path, capsys):
    from train_jobs.learning_curve import LearningCurveConfig, main

    broken = tmp_path / "broken"  # passes the inputs check (its shards are there), fails once its run reads them
    for split in ("train", "val"):
        (broken / "corpus" / split).mkdir(parents=True)
        (broken / "corpus" / split / "part-0.parquet").write_bytes(b"not parquet")

    def cfg(steps, extra=(), **kw):
        return LearningCurveConfig(
            overrides=TINY + [f"data.cache_dir={tmp_path / 'cache'}"],
            sources=[{"name": "truth", "corpus_root": str(worlds["full"])},
                     {"name": "annotated", "corpus_root": str(worlds["stated"])}, *extra],
            truth_root=str(worlds["stated"]), seeds=[0], steps=steps, eval_every=2, out_dir=str(tmp_path / "lc"),
            score_cpus=0.5, **kw)

    # two runs at once (one 0.5-CPU worker each on the session's 2 CPUs); the third fails once it starts,
    # and the two that trained are kept
    with pytest.raises(RuntimeError, match=r"1 run\(s\) failed \(broken seed 0\)"):
        main(cfg(4, [{"name": "broken", "corpus_root": str(broken)}], concurrent_runs=2))
    spans = {}
    for src in ("truth", "annotated"):
        kept = json.loads((tmp_path / "lc" / "scores" / f"{src}-seed0.json").read_text())["rows"]
        spans[src] = (kept[0]["run_started"], kept[0]["run_ended"])
    assert not (tmp_path / "lc" / "scores" / "broken-seed0.json").exists()
    assert max(a for a, _ in spans.values()) < min(b for _, b in spans.values()), spans  # they overlapped

    capsys.readouterr()
    res = main(cfg(4))  # one after another in this process: both runs are kept, nothing trains
    printed = capsys.readouterr().out
    assert printed.count("kept scores") == 2 and "training 4 steps" not in printed
    rows = res.rows
    assert sorted((r["source"], r["step"]) for r in rows) == [("annotated", 2), ("annotated", 4), ("truth", 2), ("truth", 4)]
    for r in rows:
        assert 0 <= r["truth/family/spatial_ap"] <= 1 and r["truth/images"] > 0 and r["seconds"] > 0
        assert r["split"] == "val"
    rep = res.summary["report"]
    assert rep["split"] == "test" and rep["images"] == 8  # scenes 0, 4, ..., 28 of the 30: all of the split
    for src in ("truth", "annotated"):
        cell = rep["sources"][src]["top10_precision"]
        assert 0 <= cell["lo"] <= cell["mean"] <= cell["hi"] <= 1 and len(cell["per_seed"]) == 1
    assert "gap" in rep["sources"]["annotated"]["top10_precision"]
    assert res.summary["coverage"]["truth"]["spatial"]["covered"] == 1.0  # the full world states all of it
    assert res.summary["coverage"]["annotated"]["spatial"]["covered"] < 0.9
    out = Path(res.out_dir)
    for name in ("curves.md", "curves.json", "curves.parquet", "curves_steps.png", "curves_time.png"):
        assert (out / name).is_file(), name
    table = (out / "curves.md").read_text()
    assert "| truth | 4 |" in table and "| annotated | 4 |" in table and "truth stated" in table
    assert "Report: test split, all 8 images" in table
    kept = json.loads((out / "scores" / "truth-seed0.json").read_text())
    assert len(kept["rows"]) == 2
    again = main(cfg(4))  # nothing to train or score: the kept scores and cells are read back
    printed = capsys.readouterr().out
    assert "kept scores" in printed and "report: scoring" not in printed
    assert json.dumps(again.rows, sort_keys=True) == json.dumps(rows, sort_keys=True)  # NaN-safe comparison
