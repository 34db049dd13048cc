"""The probe job's readout options end to end without Ray: probe_model, scoring, text baseline, tables."""

from __future__ import annotations

import numpy as np
import pytest

from eval_jobs import triplet_probe as job
from relate.config import ConfigError, load_config
from relate.data.poporo import read_triplet_manifest
from relate.data.synthetic_triplets import write_synthetic_triplets
from relate.probe.readouts import readout_correct
from relate.zoo import create_extractor, load_image

DEMO = job.__file__.replace("triplet_probe.py", "configs/triplet_probe_synthetic.yaml")


def _cfg(tmp_path, *overrides):
    return load_config(job.TripletProbeConfig, DEMO, [
        f"output_dir={tmp_path / 'run'}", "synthetic.n_triplets=24", "synthetic.image_size=32", *overrides])


def test_defaults_are_todays_readout(tmp_path):
    cfg = _cfg(tmp_path)
    assert cfg.readout.is_default and cfg.readout.metrics == ["cosine"]
    assert all(m.layer_pool == "avg" for m in cfg.models)
    with pytest.raises(ConfigError, match="repeats"):
        _cfg(tmp_path, "readout.metrics=[cosine, cosine]")
    with pytest.raises(ConfigError, match="readout.metrics"):
        _cfg(tmp_path, "readout.metrics=[manhattan]")


def test_readout_ablations_scored_and_reported(tmp_path):
    cfg = _cfg(tmp_path, "readout.metrics=[cosine, euclidean, spearman]", "readout.linear_probe.enabled=true",
               "readout.linear_probe.n_splits=3", "readout.text_baseline={encoder: minilm}")
    ts = read_triplet_manifest(write_synthetic_triplets(tmp_path / "syn", cfg.synthetic))
    spec = cfg.models[2].model_copy(update={"layer_pool": "head"})  # test_vit, layers [0, 1]
    out = job.probe_model(spec, ts, str(tmp_path / "cache"), 16, readout=cfg.readout)
    assert set(out["readouts"]) == {"cosine", "euclidean", "spearman"}
    assert list(out["readouts"]["cosine"]) == ["final", "block0_head", "block1_head"]
    assert out["readouts"]["cosine"] == out["correct"]  # the cosine ablation is today's readout
    # Each metric's correctness equals a direct computation on the extractor's own features.
    ex = create_extractor("test_vit")
    f = {r: ex.encode([load_image(p) for p in v]) for r, v in ts.role_inputs("image").items()}
    assert out["readouts"]["euclidean"]["final"] == readout_correct(f["query"], f["target"], f["distractor"],
                                                                    "euclidean").tolist()
    # head pooling of the last block is the final feature, so every readout agrees there
    for m in ("cosine", "euclidean", "spearman"):
        assert out["readouts"][m]["block1_head"] == out["readouts"][m]["final"]
    lp = out["linear_probe"]["final"]
    assert len(lp["correct"]) == len(ts) and len(lp["fold_accuracy"]) == 3

    rows, models, _ = job._score(cfg.model_copy(update={"models": [spec]}), ts, [out])
    m = models[spec.display]
    assert set(m["linear_probe"]) == {"final", "block0_head", "block1_head"}
    assert m["readouts"]["cosine"]["final"] == m["scores"]
    text = job._text_baseline(cfg, ts)
    assert set(text["scores"]) == {"cosine", "euclidean", "spearman"} and text["encoder"] == "minilm"
    md = job._ablation_markdown(models, text)
    assert "### Zero-shot readouts: test_vit" in md and "| block0_head | spearman |" in md
    assert "### Learned linear probe (held-out, 3-fold GroupKFold" in md
    assert "### Zero-shot text baseline (class names only, minilm)" in md
    np.testing.assert_equal(len(md.splitlines()) > 12, True)
