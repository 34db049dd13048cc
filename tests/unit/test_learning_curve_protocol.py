"""train_jobs.learning_curve's protocol: curves on validation, the test split scored once at the end.

The training run and the checkpoint scorer are replaced by recorders (the job's own loop, report,
intervals and files run as they are), so the order in which splits are read is observable."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import train_jobs.learning_curve as lc
from relate.metrics.truth_intervals import TruthKit, save_kit

pytestmark = pytest.mark.unit


def _kit(values):
    return TruthKit(len(values), {"spatial": (np.arange(len(values), dtype=np.int32),
                                              np.asarray(values, np.float32), np.array([True, False] * (len(values) // 2)))},
                    np.asarray(values, float), 10)


@pytest.fixture
def recorded(monkeypatch, tmp_path):
    events: list[tuple] = []

    def train(cfg):
        run = cfg.run.name
        events.append(("train", run))
        ckpts = [(str(tmp_path / run / f"step{s}"), {"step": s, "train_seconds": float(s)}) for s in (2, 4)]
        return SimpleNamespace(checkpoints=ckpts, run=run)

    def score(jobs, cpus):
        out = []
        for path, root, split, limit, *kit in jobs:
            events.append(("score", split, limit, Path(path).name))
            if kit:  # the report asked for the seed's cells
                save_kit(_kit([0.9, 0.1, 0.8, 0.3]), kit[0])
            out.append({"truth/family/spatial_ap": 0.5, "truth/top10_precision": 0.5})
        return out

    import ray
    import train_jobs.train_relation as tr

    monkeypatch.setattr(tr, "main", train)
    monkeypatch.setattr(lc, "_run_scoring", score)
    monkeypatch.setattr(lc, "source_coverage", lambda corpus, truth: {"spatial": {"covered": 1.0, "not_true": 0.0}})
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    for folder in ("a/corpus/train", "a/corpus/val", "b/corpus/train", "b/corpus/val", "w"):  # the inputs a run needs
        (tmp_path / folder).mkdir(parents=True)
        if "corpus" in folder:
            (tmp_path / folder / "part-0.parquet").touch()
    return events


def _cfg(tmp_path, **kw):
    return lc.LearningCurveConfig(sources=[{"name": "truth", "corpus_root": str(tmp_path / "a")},
                                           {"name": "annotated", "corpus_root": str(tmp_path / "b")}],
                                  truth_root=str(tmp_path / "w"), seeds=[0, 1], steps=4, eval_every=2,
                                  eval_images=50, out_dir=str(tmp_path / "lc"), resamples=200, **kw)


def test_the_test_split_is_read_only_after_every_run_has_trained(recorded, tmp_path):
    res = lc.main(_cfg(tmp_path))
    last_train = max(i for i, e in enumerate(recorded) if e[0] == "train")
    test_reads = [(i, e) for i, e in enumerate(recorded) if e[0] == "score" and e[1] == "test"]
    curve_reads = [e for e in recorded if e[0] == "score" and e[1] != "test"]
    assert len([e for e in recorded if e[0] == "train"]) == 4
    assert curve_reads and all(e[1] == "val" and e[2] == 50 for e in curve_reads)  # curves: validation, its limit
    assert len(test_reads) == 4 and all(i > last_train for i, _ in test_reads)
    assert all(e[2] is None and e[3] == "step4" for _, e in test_reads)  # whole split, final checkpoints only
    rep = res.summary["report"]
    assert rep["split"] == "test" and rep["images"] == 4 and rep["seeds"] == {"truth": [0, 1], "annotated": [0, 1]}
    spatial = rep["sources"]["annotated"]["family/spatial_ap"]
    assert 0 <= spatial["lo"] <= spatial["mean"] <= spatial["hi"] <= 1 and spatial["gap"] == 0.0
    assert "Report: test split, all 4 images" in (Path(res.out_dir) / "curves.md").read_text()
    assert json.loads((Path(res.out_dir) / "curves.json").read_text())["report"]["split"] == "test"


def test_a_rerun_scores_nothing_again(recorded, tmp_path):
    lc.main(_cfg(tmp_path))
    recorded.clear()
    lc.main(_cfg(tmp_path))
    assert recorded == []


def test_curves_on_the_report_split_are_refused(tmp_path):
    with pytest.raises(ValueError, match="both 'test'"):
        _cfg(tmp_path, eval_split="test")
    assert _cfg(tmp_path, eval_split="test", report_split=None).report_split is None


def test_a_missing_corpus_is_refused_before_any_run_trains(recorded, tmp_path):
    """The second source has no validation split: refused up front, naming it, with nothing trained
    (not after the first source's runs have trained)."""
    from relate.job_inputs import MissingInputError

    (tmp_path / "b" / "corpus" / "val" / "part-0.parquet").unlink()
    with pytest.raises(MissingInputError, match=r"val split of a source's corpus.*b \(splits \['val'\]\)"):
        lc.main(_cfg(tmp_path))
    assert recorded == []
