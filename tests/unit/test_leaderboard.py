"""eval_jobs.leaderboard on two small run folders written here (two runs, three systems)."""

from __future__ import annotations

import csv
import json

import pyarrow.parquet as pq
import pytest

from eval_jobs.leaderboard import LeaderboardConfig, _mark_significance, _parse, main
from relate.schema import PER_IMAGE_SCHEMA, to_table

_SETTING = {"axis": "A1", "protocol": "paper", "mode": "graph_constrained", "matcher": "one_to_one",
            "box_source": "gt"}


def _rows(system, benchmark, hits, k=50, ids=None):
    """One row per image with n_gt=4 (2 'on', 2 'has'): hits[i] of them credited, 'on' first."""
    out = []
    for i, h in enumerate(hits):
        terms = [{"predicate": "on", "hits": min(h, 2), "n_gt": 2}, {"predicate": "has", "hits": max(h - 2, 0), "n_gt": 2}]
        out.append({"system": system, "benchmark": benchmark, **_SETTING, "image_id": (ids or [f"img{j}" for j in range(len(hits))])[i],
                    "k": k, "n_gt": 4, "hits": h, "recall": h / 4, "predicates": terms})
    return out


def _run(path, rows, per_image="per_image.parquet"):
    path.mkdir()
    (path / "results.json").write_text(json.dumps({"protocol": {"name": "paper"}, "per_image": per_image}))
    if per_image:
        pq.write_table(to_table(rows, PER_IMAGE_SCHEMA, table=per_image), path / per_image)
    return str(path)


def test_leaderboard_writes_intervals_and_paired_differences(tmp_path):
    good = [4, 3, 4, 2, 3, 4, 3, 4]
    run1 = _run(tmp_path / "run1", _rows("strong", "vg150", good) + _rows("weak", "vg150", [h - 2 for h in good]))
    run2 = _run(tmp_path / "run2", _rows("same", "vg150", good) + _rows("same", "psg", [1, 2, 3]))
    res = main(LeaderboardConfig(runs=[run1, run2], out_dir=str(tmp_path / "lb"), resamples=500))
    md = (tmp_path / "lb" / "leaderboard.md").read_text()
    assert "## vg150 (A1, graph_constrained, one_to_one, gt)" in md and "## psg (" in md
    assert "| strong | run1 | 8 | 84.4 |" in md  # 27/32 of GT credited
    assert "| weak | run1 | 8 | 34.4 |" in md
    # strong beats weak on every image: no resample crosses, p below 2/500; strong vs its copy:
    # difference exactly 0, p = 1. BH over the table's six p (four bounds of 0.004, two 1s):
    # rank 4 of 6 gives 0.004 * 6 / 4 = 0.006 for all four
    assert "| vg150 | strong (run1) | weak (run1) | 8 | 50.0 | [50.0, 50.0] | < 0.004 | 0.006 | yes |" in md
    assert "| vg150 | strong (run1) | same (run2) | 8 | 0.0 | [0.0, 0.0] | 1.000 | 1.000 | no |" in md
    with (tmp_path / "lb" / "leaderboard.csv").open() as f:
        entries = list(csv.DictReader(f))
    assert [(e["benchmark"], e["system"], e["run"]) for e in entries] == [
        ("psg", "same", "run2"), ("vg150", "same", "run2"), ("vg150", "strong", "run1"), ("vg150", "weak", "run1")]
    vg = {e["system"]: e for e in entries if e["benchmark"] == "vg150"}
    assert float(vg["strong"]["R"]) == pytest.approx(27 / 32)
    assert float(vg["strong"]["mR"]) == pytest.approx((1.0 + 11 / 16) / 2)  # 'on' always, 'has' 11 of 16
    assert float(vg["strong"]["R_low"]) <= 27 / 32 <= float(vg["strong"]["R_high"])
    with (tmp_path / "lb" / "leaderboard_pairs.csv").open() as f:
        pairs = list(csv.DictReader(f))
    assert len(pairs) == len(res.pairs) == 3  # the three vg150 entries; psg has one
    assert {p["significant_R"] for p in pairs} == {"True", "False"}


def test_run_without_per_image_rows_is_named(tmp_path):
    run = _run(tmp_path / "sgb_run", [], per_image=None)
    with pytest.raises(ValueError, match=r"sgb_run/results.json names no per_image.parquet"):
        main(LeaderboardConfig(runs=[run], out_dir=str(tmp_path / "lb")))
    (tmp_path / "gone").mkdir()
    (tmp_path / "gone" / "results.json").write_text(json.dumps({"per_image": "per_image.parquet"}))
    with pytest.raises(FileNotFoundError, match=r"gone/per_image.parquet"):
        main(LeaderboardConfig(runs=[str(tmp_path / "gone")], out_dir=str(tmp_path / "lb")))


def test_cells_without_shared_images_are_an_error_naming_the_files(tmp_path):
    run1 = _run(tmp_path / "a", _rows("s1", "vg150", [1, 2], ids=["x", "y"]))
    run2 = _run(tmp_path / "b", _rows("s2", "vg150", [1, 2], ids=["p", "q"]))
    with pytest.raises(ValueError, match=r"share no image_id \(.*a/per_image.parquet, .*b/per_image.parquet\)"):
        main(LeaderboardConfig(runs=[run1, run2], out_dir=str(tmp_path / "lb")))


def test_missing_k_lists_the_available_ones(tmp_path):
    run = _run(tmp_path / "r", _rows("s", "vg150", [1, 2], k=20))
    with pytest.raises(ValueError, match=r"no rows at K=50; its Ks are \[20\]"):
        main(LeaderboardConfig(runs=[run], out_dir=str(tmp_path / "lb")))


def test_command_line():
    cfg = _parse(["r1", "r2", "--out", "o", "--k", "20", "--resamples", "50", "--seed", "3"])
    assert (cfg.runs, cfg.out_dir, cfg.k, cfg.resamples, cfg.seed) == (["r1", "r2"], "o", 20, 50, 3)


def test_significance_is_marked_after_the_correction():
    # three raw p below 0.05, one survives Benjamini-Hochberg (q 0.04, 0.0533, 0.0533, 0.2)
    rows = [{"p_R": 0.01, "p_mR": 0.04}, {"p_R": 0.03, "p_mR": 0.20}, {"p_R": None, "p_mR": None}]
    _mark_significance(rows, (("p_R", "q_R", "sig_R"), ("p_mR", "q_mR", "sig_mR")), alpha=0.05)
    assert [(r.get("sig_R"), r.get("sig_mR")) for r in rows] == [(True, False), (False, False), (None, None)]
    assert rows[0]["q_R"] == pytest.approx(0.04) and rows[1]["q_R"] == pytest.approx(0.04 * 4 / 3)
