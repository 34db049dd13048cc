"""Files read from run storage or a download are never fully unpickled: a crafted pickle in a
run folder or a backbone file is refused, and its payload does not run."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from relate.zoo.timm_models import load_state_dict_file
from train_jobs.relation_worker import load_train_state


class _Payload:
    """Unpickling this calls os.makedirs(marker): the stand-in for arbitrary code."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.makedirs, (self.marker,))


def _crafted(path, marker, **state):
    torch.save({**state, "step": _Payload(str(marker))}, path)
    return path


def test_the_crafted_file_really_runs_code_when_fully_unpickled(tmp_path):
    # the control: without the weights-only unpickler the payload executes
    path = _crafted(tmp_path / "train_state.pt", tmp_path / "ran")
    torch.load(path, weights_only=False)
    assert (tmp_path / "ran").is_dir()


def test_a_crafted_training_state_is_refused_and_its_payload_does_not_run(tmp_path):
    path = _crafted(tmp_path / "train_state.pt", tmp_path / "ran", model={"w": torch.ones(2)})
    with pytest.raises(ValueError, match=r"train_state.pt: refused to load"):
        load_train_state(path)
    assert not (tmp_path / "ran").exists()


def test_a_real_training_state_round_trips(tmp_path):
    # what TrainRunner.save_checkpoint writes: weights, EMA, Adam's state, the step, numpy's PCG64 state
    net = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    net(torch.randn(4, 3)).sum().backward()
    opt.step()
    rng = np.random.default_rng(7)
    rng.random(5)
    state = {"model": net.state_dict(), "ema": {k: v.clone() for k, v in net.state_dict().items()},
             "opt": opt.state_dict(), "step": 12, "rng": rng.bit_generator.state, "train_seconds": 3.5}
    torch.save(state, tmp_path / "train_state.pt")
    back = load_train_state(tmp_path / "train_state.pt")
    assert back["step"] == 12 and back["train_seconds"] == 3.5 and back["rng"] == rng.bit_generator.state
    assert torch.equal(back["model"]["weight"], net.weight.detach())
    opt2 = torch.optim.AdamW(torch.nn.Linear(3, 2).parameters(), lr=1e-3)
    opt2.load_state_dict(back["opt"])
    assert torch.equal(opt2.state_dict()["state"][0]["exp_avg"], opt.state_dict()["state"][0]["exp_avg"])


def test_a_crafted_backbone_file_is_refused_and_a_plain_one_loads(tmp_path):
    bad = _crafted(tmp_path / "dino.pth", tmp_path / "ran", teacher={"w": torch.ones(2)})
    with pytest.raises(ValueError, match=r"dino.pth: refused to load"):
        load_state_dict_file(str(bad))
    assert not (tmp_path / "ran").exists()
    torch.save({"state_dict": {"module.w": torch.arange(3.0)}}, tmp_path / "ok.pth")
    assert torch.equal(load_state_dict_file(str(tmp_path / "ok.pth"))["w"], torch.arange(3.0))
