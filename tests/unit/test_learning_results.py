"""scripts.learning_results: a learning-curve report becomes the result file the docs' tables render.

The report here has the shape ``train_jobs.learning_curve._report`` writes (per source and figure:
mean, interval, each seed's value, the paired gap to the first source), with figures chosen so that
every cell of the rendered table can be checked by eye.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from scripts.learning_results import build
from scripts.results_render import render


def _cell(mean, lo, hi, per_seed, gap=None):
    c = {"mean": mean, "lo": lo, "hi": hi, "per_seed": per_seed}
    if gap is not None:
        c.update({"gap": gap[0], "gap_lo": gap[1], "gap_hi": gap[2]})
    return c


def _run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    report = {"split": "test", "images": 1190, "resamples": 200, "seeds": {"truth": [0], "annotated": [0]},
              "sources": {
                  "truth": {"family/contact_ap": _cell(0.99, 0.985, 0.995, [0.99]),
                            "family/depth_ap": _cell(0.86, 0.849, 0.871, [0.86]),
                            "top10_precision": _cell(0.98, 0.975, 0.985, [0.98])},
                  "annotated": {"family/contact_ap": _cell(0.97, 0.96, 0.98, [0.97], gap=(-0.02, -0.03, -0.01)),
                                "family/depth_ap": _cell(0.80, 0.79, 0.81, [0.80], gap=(-0.06, -0.07, -0.05)),
                                "top10_precision": _cell(0.96, 0.955, 0.965, [0.96], gap=(-0.02, -0.025, -0.015))}}}
    coverage = {"annotated": {"contact": {"covered": 0.582}, "depth": {"covered": 0.924}}}
    (run / "curves.json").write_text(json.dumps({"report": report, "coverage": coverage}))
    (run / "learning_curve_config.yaml").write_text("recipe: /somewhere/train_jobs/configs/cpu_long.yaml\nsteps: 2800\n")
    pq.write_table(pa.Table.from_pylist([
        {"source": "truth", "seed": 0, "step": 1400, "seconds": 600.0},
        {"source": "truth", "seed": 0, "step": 2800, "seconds": 1500.0},
        {"source": "annotated", "seed": 0, "step": 2800, "seconds": 1800.0}]), run / "curves.parquet")
    return run


def test_a_report_becomes_a_learning_result_the_table_renders(tmp_path: Path) -> None:
    old = {"kind": "learning", "title": "T", "run": {"scenes": 12000},
           "sources": [{"name": "truth", "label": "(a) truth"}, {"name": "annotated", "label": "(b) annotated"}],
           "rows": [{"family": "contact", "bar": 0.95, "note": "kept note"}, {"family": "depth", "bar": 0.85}]}
    doc = build(_run_dir(tmp_path), old, "abc1234", "2 cores", {"a": "python -m x"})
    assert doc["run"] == {"recipe": "train_jobs/configs/cpu_long.yaml", "steps": 2800, "scenes": 12000,
                          "eval_images": 1190, "eval_split": "test", "minutes_per_seed": [25.0, 30.0]}
    assert [s["name"] for s in doc["sources"]] == ["truth", "annotated"]
    assert doc["sources"][0]["bar"] is True and doc["sources"][1]["gap_to"] == "truth"
    assert doc["sources"][0]["label"] == "(a) truth"  # what a person wrote is kept
    rows = {r["family"]: r for r in doc["rows"]}
    assert list(rows) == ["contact", "depth", "top-10 precision"]
    assert rows["contact"]["note"] == "kept note" and rows["contact"]["annotated"]["stated"] == 0.582
    assert rows["depth"]["annotated"]["gap_lo"] == -0.07

    root = tmp_path / "results"
    root.mkdir()
    (root / "lc.json").write_text(json.dumps(doc))
    table = render("lc", "table", root)
    contact = next(line for line in table.splitlines() if line.startswith("| contact"))
    depth = next(line for line in table.splitlines() if line.startswith("| depth"))
    # contact's lower bound 0.985 clears its bar 0.95 (bold); depth's 0.849 does not reach 0.85
    assert "**0.990** [0.985, 0.995]" in contact and "(-0.020 [-0.030, -0.010])" in contact
    assert "0.860 [0.849, 0.871]" in depth and "**0.860**" not in depth and "(-0.060 [-0.070, -0.050])" in depth
    top10 = next(line for line in table.splitlines() if line.startswith("| top-10"))
    assert top10.endswith("|  |") or top10.rstrip("| ").endswith("(-0.020 [-0.025, -0.015])")  # no bar: none shown
    assert "1190 test images" in render("lc", "caption", root) or "1,190 test images" in render("lc", "caption", root)


def test_a_run_without_a_report_is_refused(tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    (run / "curves.json").write_text(json.dumps({"coverage": {}}))
    with pytest.raises(SystemExit, match="no report"):
        build(run, {}, None, None, None)
