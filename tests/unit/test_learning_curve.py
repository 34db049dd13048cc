"""train_jobs.learning_curve: its final-step table (means, Student-t intervals, paired gaps), its plots
and its config checks, on rows worked by hand."""

from __future__ import annotations

import math

import pytest
from scipy import stats

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
    assert t["hi"] - t["mean"] == pytest.approx(half)
    a = summary["annotated"]["truth/family/spatial_ap"]
    assert a["mean"] == pytest.approx(0.75)
    # paired by seed: 0.70 - 0.90 = -0.20, 0.80 - 0.94 = -0.14 -> -0.17
    assert a["gap"] == pytest.approx(-0.17)
    assert summary["annotated"]["truth/top10_precision"]["gap"] == pytest.approx(((0.6 - 0.8) + (0.5 - 0.84)) / 2)
    assert "gap" not in t  # the reference has no gap to itself
    assert "| annotated | 100 |" in table and "(-0.170)" in table and "spatial_ap" in table


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
