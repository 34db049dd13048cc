"""`python -m eval_jobs.prepare synthetic --root WORLD` builds the synthetic suite that
eval_jobs/configs/ovsgg_synthetic.yaml reads, with a manifest of what it wrote."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from eval_jobs.ovsgg import OVSGGConfig
from eval_jobs.ovsgg_cells import load_benchmark
from eval_jobs.prepare import parse_args
from relate.config import load_config
from relate.data.synthetic import SyntheticConfig
from relate.data.synthetic_corpus import write_corpus

CONFIG = Path(__file__).resolve().parents[2] / "eval_jobs" / "configs" / "ovsgg_synthetic.yaml"


def test_synthetic_suite_is_what_the_shipped_config_reads(tmp_path, monkeypatch):
    world = write_corpus(tmp_path / "world", SyntheticConfig(seed=1, num_scenes=12, min_size=96, max_size=128),
                         split=lambda i: "test" if i % 2 else "train")
    cfg, text = parse_args(["synthetic", "--root", str(world), "--out", str(tmp_path / "runs" / "demo" / "prepared")])
    assert cfg is None and text is None
    suite = tmp_path / "runs" / "demo" / "prepared" / "synthetic"
    manifest = json.loads((suite / "manifest.json").read_text())
    assert set(manifest["benchmarks"]) == {"vg150", "psg", "haystack", "spatialsense", "psg_det"}
    some = "psg_det/detections.parquet"
    assert manifest["files"][some]["sha256"] == hashlib.sha256((suite / some).read_bytes()).hexdigest()
    # the shipped config's relative paths resolve from the repository root: run it from tmp_path
    monkeypatch.chdir(tmp_path)
    shipped = load_config(OVSGGConfig, CONFIG)
    for spec in shipped.benchmarks:
        bench = load_benchmark(spec)
        assert bench.corpus.num_rows == 6 or spec.axis == "A6", spec.name  # the six test scenes
        assert set(bench.corpus.column("split").to_pylist()) == {"test"}


def test_synthetic_root_without_a_corpus_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "empty")):
        parse_args(["synthetic", "--root", str(tmp_path / "empty"), "--out", str(tmp_path / "p")])
