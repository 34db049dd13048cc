"""`serve run serve_apps/configs/local.yaml` serves the newest trained checkpoint under runs/ and
names it; random weights only through the config that asks for them by name."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import yaml

from relate.checkpoint import find_latest_checkpoint
from serve_apps.config import ServeAppConfig

REPO = Path(__file__).resolve().parents[2]


def _app_args(name: str) -> dict:
    return yaml.safe_load((REPO / "serve_apps" / "configs" / name).read_text())["applications"][0]["args"]


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> tuple[Path, Path, Path]:
    """runs/ with an older and a newer checkpoint, and a folder that only looks like one."""
    from serve_apps.tiny import save_tiny_checkpoint

    runs = tmp_path_factory.mktemp("runs")
    old = save_tiny_checkpoint(runs / "ray_train" / "a-run" / "checkpoint_000004", ["on", "near"])
    new = save_tiny_checkpoint(runs / "demo" / "train" / "cpu_small" / "checkpoint_000150", ["on", "near"])
    then = time.time() - 3600
    os.utime(old / "model.safetensors", (then, then))
    fake = runs / "other" / "not_a_checkpoint"
    fake.mkdir(parents=True)
    (fake / "meta.json").write_text(json.dumps({"format": "something else"}))
    (fake / "model.safetensors").write_bytes(b"")
    (runs / "demo" / "checkpoint").symlink_to(new, target_is_directory=True)  # as make demo links it
    return runs, old, new


def test_the_newest_checkpoint_is_found_by_when_its_weights_were_written(two_runs):
    runs, old, new = two_runs
    assert find_latest_checkpoint(runs) == new
    now = time.time()
    os.utime(old / "model.safetensors", (now + 60, now + 60))
    try:
        assert find_latest_checkpoint(runs) == old
    finally:
        os.utime(old / "model.safetensors", (now - 3600, now - 3600))
    assert find_latest_checkpoint(runs / "other") is None


def test_local_yaml_serves_the_latest_checkpoint_and_names_it(two_runs, monkeypatch):
    runs, _, new = two_runs
    monkeypatch.chdir(runs.parent)
    args = _app_args("local.yaml")
    args["relation"]["latest_root"] = runs.name
    cfg = ServeAppConfig.model_validate(args)
    assert cfg.relation.checkpoint == "latest" and cfg.relation.random is None  # no random weights by default
    resolved = cfg.relation.resolved()
    assert resolved.checkpoint == str(new.resolve())
    assert resolved.weights_label() == f"checkpoint {new.resolve()}"


def test_with_no_checkpoint_it_refuses_and_says_how_to_make_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = ServeAppConfig.model_validate(_app_args("local.yaml"))
    with pytest.raises(ValueError, match=r"holds no trained checkpoint: make one with `make demo`.*local_random\.yaml"):
        cfg.relation.resolved()


def test_random_weights_only_by_name():
    cfg = ServeAppConfig.model_validate(_app_args("local_random.yaml"))
    assert cfg.relation.checkpoint is None and cfg.relation.random is not None
    assert cfg.relation.resolved() is cfg.relation
    assert cfg.relation.weights_label().startswith("random weights (seed 0")
    local = _app_args("local.yaml")["http"], _app_args("local_random.yaml")["http"]
    assert local[0] == local[1]  # the same address, so the README's URLs hold for both
