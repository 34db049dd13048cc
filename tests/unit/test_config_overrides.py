"""Dotted command-line overrides (relate.config): values parsed as YAML, sections created on the
way, list entries addressed by position or by their ``name`` (``--set benchmarks.vg150.path=...``)."""

from __future__ import annotations

import pytest

from eval_jobs.ovsgg import OVSGGConfig
from relate.config import ConfigError, apply_overrides, load_config

TREE = {"ks": [20, 50], "benchmarks": [{"name": "vg150", "path": "a"}, {"name": "psg", "path": "b"}]}


def test_scalars_sections_and_yaml_values():
    out = apply_overrides({}, ["optim.lr=3.0e-4", "run.flags=[a, b]", "x=true"])
    assert out == {"optim": {"lr": 3.0e-4}, "run": {"flags": ["a", "b"]}, "x": True}


def test_list_entries_by_name_or_position_and_the_input_is_not_mutated():
    out = apply_overrides(TREE, ["benchmarks.psg.path=/data/psg", "benchmarks.0.split=val", "ks.1=100"])
    assert out["benchmarks"] == [{"name": "vg150", "path": "a", "split": "val"}, {"name": "psg", "path": "/data/psg"}]
    assert out["ks"] == [20, 100] and TREE["benchmarks"][1]["path"] == "b"


@pytest.mark.parametrize("item, message", [
    ("benchmarks.hico.path=x", r"no entry named 'hico'; entries: \['vg150', 'psg'\]"),
    ("benchmarks.2.path=x", "index 2 is past the list's 2 entries"),
    ("ks.0.deep=1", "'0' is not a section"),
    ("novalue", "must look like key.sub=value"),
])
def test_bad_overrides_name_the_problem(item, message):
    with pytest.raises(ConfigError, match=message):
        apply_overrides(TREE, [item])


def test_a_shipped_evaluation_config_takes_benchmark_overrides():
    cfg = load_config(OVSGGConfig, "eval_jobs/configs/ovsgg_synthetic.yaml",
                      ["benchmarks.psg_open.vocabulary=benchmark", "benchmarks.haystack.min_support=3"])
    spec = {b.name: b for b in cfg.benchmarks}
    assert spec["psg_open"].vocabulary == "benchmark" and spec["haystack"].min_support == 3


def test_on_off_yes_no_stay_strings_and_true_false_are_booleans(tmp_path):
    """YAML 1.1 reads off/on/yes/no as booleans; configs read them as the strings typed
    (``occlusion_cue: off`` failed the field's validation before)."""
    from relate.config import load_config
    from relate.model.config import RelationModelConfig

    cfg = load_config(RelationModelConfig, None, ["occlusion_cue=off", "deformable.enabled=false"])
    assert cfg.occlusion_cue == "off" and cfg.deformable.enabled is False
    (tmp_path / "m.yaml").write_text("occlusion_cue: off\ndeformable:\n  enabled: True\n")
    cfg = load_config(RelationModelConfig, tmp_path / "m.yaml")
    assert cfg.occlusion_cue == "off" and cfg.deformable.enabled is True
