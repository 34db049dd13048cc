"""The triplet-probe job's config: strict, with clear messages (no Ray needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from eval_jobs.triplet_probe import TripletProbeConfig
from relate.config import ConfigError, load_config

CONFIGS = Path(__file__).resolve().parents[2] / "eval_jobs" / "configs"
DEMO = CONFIGS / "triplet_probe_synthetic.yaml"


def test_shipped_configs_validate():
    demo = load_config(TripletProbeConfig, DEMO)
    assert [m.name for m in demo.models] == ["pixels", "color_hist", "test_vit"]
    assert demo.task.resources.num_cpus < 1  # fractional: two tasks share a 2-core machine
    full = load_config(TripletProbeConfig, CONFIGS / "triplet_probe.yaml")
    from relate.zoo import zoo_names

    assert {m.name for m in full.models} <= set(zoo_names())


def test_probe_config_is_strict():
    with pytest.raises(ConfigError, match="exactly one of manifest and synthetic"):
        load_config(TripletProbeConfig, DEMO, ["manifest=x.csv"])
    with pytest.raises(ConfigError, match="bootstrap.nboot: Extra inputs"):
        load_config(TripletProbeConfig, DEMO, ["bootstrap.nboot=3"])
    with pytest.raises(ConfigError, match="repeated"):
        load_config(TripletProbeConfig, DEMO, ["models=[{name: pixels}, {name: pixels}]"])
