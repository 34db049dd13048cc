"""The probe job with every readout ablation on, through Ray: results.json and table.md carry them."""

from __future__ import annotations

import json
from pathlib import Path

from eval_jobs.triplet_probe import TripletProbeConfig, main
from relate.config import load_config

DEMO = Path(__file__).resolve().parents[2] / "eval_jobs" / "configs" / "triplet_probe_synthetic.yaml"


def test_probe_job_writes_readout_ablations(ray_session, tmp_path):
    cfg = load_config(TripletProbeConfig, DEMO, [
        f"output_dir={tmp_path / 'run'}", "synthetic.n_triplets=16", "synthetic.image_size=32",
        "bootstrap.n_boot=100", "paired.enabled=false", "models=[{name: color_hist}, "
        "{name: test_vit, pretrained: false, layers: [0, 1], layer_pool: head}]",
        "readout.metrics=[cosine, euclidean, spearman]", "readout.linear_probe.enabled=true",
        "readout.linear_probe.n_splits=4", "readout.linear_probe.group_by=query", "readout.text_baseline={}"])
    res = main(cfg)
    saved = json.loads(Path(res.paths["results"]).read_text())
    vit = saved["models"]["test_vit"]
    assert set(vit["readouts"]) == {"cosine", "euclidean", "spearman"}
    assert vit["readouts"]["cosine"]["final"] == vit["scores"]  # the zero-shot row is unchanged
    assert set(vit["linear_probe"]) == {"final", "block0_head", "block1_head"}
    assert saved["text_baseline"]["encoder"] == "minilm"
    md = Path(res.paths["table"]).read_text()
    assert "## Readout ablations" in md and "| block1_head | euclidean |" in md
    assert "### Zero-shot text baseline" in md and "### Learned linear probe" in md
