"""train_jobs.learning_curve: its final-step table (means, Student-t intervals, paired gaps), its plots
and its config checks, on rows worked by hand."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from scipy import stats

import train_jobs.learning_curve as lc
from train_jobs.learning_curve import LearningCurveConfig, plot_curves, summarise

pytestmark = pytest.mark.unit


def _row(source, seed, step, ap, top):
    return {"source": source, "seed": seed, "step": step, "seconds": step * 0.5,
            "truth/family/spatial_ap": ap, "truth/top10_precision": top}


ROWS = [
    _row("truth", 0, 50, 0.2, 0.1), _row("truth", 0, 100, 0.90, 0.80),
    _row("truth", 1, 50, 0.3, 0.2), _row("truth", 1, 100, 0.94, 0.84),
    _row("annotated", 0, 50, 0.1, 0.1), _row("annotated", 0, 100, 0.70, 0.60),
    _row("annotated", 1, 100, 0.80, 0.50),
    _row("annotated", 1, 50, 0.2, 0.0),  # out of order: the final step is still step 100
]


def test_final_step_means_intervals_and_paired_gaps():
    summary, table = summarise(ROWS, ["truth", "annotated"])
    t = summary["truth"]["truth/family/spatial_ap"]
    assert t["mean"] == pytest.approx(0.92) and t["n"] == 2
    half = stats.t.ppf(0.975, 1) * 0.02 / math.sqrt(2) * math.sqrt(2)  # sd of (0.90, 0.94) = 0.02 * sqrt(2)
    assert t["mean"] - t["lo"] == pytest.approx(half) and t["hi"] == 1.0  # 0.92 + 0.254 is past an AP's range
    a = summary["annotated"]["truth/family/spatial_ap"]
    assert a["mean"] == pytest.approx(0.75)
    # paired by seed: 0.70 - 0.90 = -0.20, 0.80 - 0.94 = -0.14 -> -0.17
    assert a["gap"] == pytest.approx(-0.17)
    assert summary["annotated"]["truth/top10_precision"]["gap"] == pytest.approx(((0.6 - 0.8) + (0.5 - 0.84)) / 2)
    assert "gap" not in t  # the reference has no gap to itself
    assert "| annotated | 100 |" in table and "(-0.170)" in table and "spatial_ap" in table


def test_final_step_intervals_stay_inside_zero_and_one():
    # the case: three seeds at 1.000, 0.990 and 0.990 give a t interval past 1.0
    rows = [_row("truth", s, 100, ap, 1.0) for s, ap in enumerate((1.0, 0.99, 0.99))]
    rows += [_row("annotated", s, 100, 0.0, 0.0) for s in range(3)]
    summary, _ = summarise(rows, ["truth", "annotated"])
    t = summary["truth"]["truth/family/spatial_ap"]
    half = stats.t.ppf(0.975, 2) * (0.01 / math.sqrt(3)) / math.sqrt(3)  # sd of (1, .99, .99) = 0.01/sqrt(3)
    assert t["hi"] == 1.0 and t["lo"] == pytest.approx(t["mean"] - half)
    a = summary["annotated"]["truth/family/spatial_ap"]
    assert a["lo"] == 0.0 and a["gap_lo"] >= -1.0  # every gap is about -1: the gap's interval stays >= -1


def test_plots_are_written(tmp_path):
    for x in ("step", "seconds"):
        plot_curves(ROWS, ["truth", "annotated"], x, tmp_path / f"{x}.png")
        assert (tmp_path / f"{x}.png").stat().st_size > 10_000


def test_config_refuses_duplicate_sources_and_a_budget_below_one_evaluation():
    src = [{"name": "truth", "corpus_root": "/tmp/a"}]
    with pytest.raises(ValueError, match="distinct"):
        LearningCurveConfig(sources=src * 2, truth_root="/tmp/w")
    with pytest.raises(ValueError, match="eval_every"):
        LearningCurveConfig(sources=src, truth_root="/tmp/w", steps=50, eval_every=100)


def test_concurrent_runs_must_leave_their_input_pipelines_a_cpu():
    """Two runs of two 0.5-CPU workers on 2 CPUs hold all of them, and each run's Ray Data decode
    actors then wait forever (seen: a hang, not an error); one CPU less for the workers fits."""
    lc.check_concurrency(2, 0.5, 2.0)
    lc.check_concurrency(1, 2.0, 2.0)  # one at a time: Ray Train itself waits for its workers' resources
    with pytest.raises(ValueError, match=r"concurrent_runs=2 runs x 1 CPU .* = 2 of the cluster's 2 CPUs"):
        lc.check_concurrency(2, 1.0, 2.0)
    with pytest.raises(ValueError, match="concurrent_runs=3"):
        lc.check_concurrency(3, 0.75, 2.0)


def test_a_runs_worker_cpus_come_from_its_recipe_and_overrides():
    recipe = str(Path(lc.__file__).parent / "configs" / "cpu_small.yaml")
    base = lc.LearningCurveConfig(recipe=recipe, sources=[{"name": "a", "corpus_root": "x"}], truth_root="w")
    one = base.model_copy(update={"overrides": ["run.num_workers=1", "run.worker.num_cpus=0.5"]})
    assert lc.worker_cpus_of_run(one) == 0.5
    three = base.model_copy(update={"overrides": ["run.num_workers=3", "run.worker.num_cpus=0.25"]})
    assert lc.worker_cpus_of_run(three) == 0.75
