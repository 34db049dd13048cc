"""A fixed-seed ``cpu_long`` training step holds its numbers: what performance work may not change.

Two steps of ``TrainRunner.train_step`` (forward with the forced annotated pairs, the whole
``relation_objective``, backward, clipping, AdamW, EMA) on one batch of 16 scenes of a full-truth
synthetic world, decoded by the job's own ``DecodeStage`` at the recipe's side, from
``torch.manual_seed(run.seed)``: the decoded batch, every weighted loss term, every parameter's
gradient and every parameter's update after each step must equal the figures recorded in
``golden/cpu_long_step.json`` within float32 tolerance. The figures were recorded from the code as
it stood before the training step's performance work (issue 49), so any later change that alters
what ``cpu_long`` learns (an op reordered past a dropout's random draws, a term's mask, a fused
kernel with other arithmetic) fails here.

Two arms: the recipe as committed, and with the terms the recipe's experiments switch on (implied
relations, per-family negatives, the gate's negatives on the batch's pair conditions).

A tensor is compared by a fingerprint (sum, L2 norm, largest magnitude, and its projection on a
fixed random unit vector), each within 2e-4 of the tensor's own scale: float32 round-off across
thread counts and CPUs is about 1e-6 of it; a changed term, mask or update moves it by far more.
An update is compared within 2e-3 (``RTOL_UPDATE``: AdamW magnifies round-off in near-zero gradients).

Recording, only for a change meant to alter the numbers (say so in the commit):
``python tests/unit/test_step_numerics.py --record``.
"""

from __future__ import annotations

import json
import re
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

GOLDEN = Path(__file__).resolve().parent / "golden" / "cpu_long_step.json"
RECIPE = Path(__file__).resolve().parents[2] / "train_jobs" / "configs" / "cpu_long.yaml"
ARMS = {"recipe": [], "experiments": ["data.implied_relations=true", "loss.negatives_scope=family",
                                      "loss.gate_negatives=0.5"]}
STEPS = 2
RTOL = 2e-4
# AdamW divides each gradient element by its own running RMS, so an element whose gradient is round-off
# (a bias under a normalisation) moves by a share of the learning rate from one CPU to another: the
# second step's update of such a tensor differs by up to ~1e-3 of its norm across machines (measured
# 2026-12-05: 5e-4 on this project's CPU machines). A changed learning rate, decay, clip or EMA moves
# an update by percents.
RTOL_UPDATE = 2e-3


def _fingerprint(name: str, t: torch.Tensor) -> list[float]:
    x = t.detach().double().flatten()
    if x.numel() == 0:
        return [0.0, 0.0, 0.0, 0.0]
    u = torch.from_numpy(np.random.default_rng(zlib.crc32(name.encode())).standard_normal(x.numel()))
    return [float(x.sum()), float(x.norm()), float(x.abs().max()), float(x @ (u / u.norm()))]


def _close(got: list[float], want: list[float], numel: int, floor: float, rtol: float = RTOL) -> bool:
    """Within ``rtol`` of the tensor's scale (its norm, or ``floor`` where that is larger): the scale for
    the norm, the largest value and the projection; scale * sqrt(numel) for the sum, which a norm bounds
    only that loosely."""
    scale = max(abs(want[1]), floor)
    tol = [rtol * scale * max(1.0, numel ** 0.5), rtol * scale, rtol * scale, rtol * scale]
    return all(abs(g - w) <= t for g, w, t in zip(got, want, tol))


def _world(root: Path) -> None:
    import yaml

    from relate.data.synthetic import SyntheticConfig
    from relate.data.synthetic_corpus import write_corpus
    from relate.data.world_truth import WORLD_CONFIG

    world = SyntheticConfig(num_scenes=16, coverage="full")
    write_corpus(root, world)
    (root / WORLD_CONFIG).write_text(yaml.safe_dump(world.model_dump(mode="json")))


_SPACES: dict[str, dict] = {}


def run_arm(root: Path, overrides: list[str], threads: int = 2) -> dict:
    """The fingerprints of one arm: batch, then per step its loss terms, gradients and updates."""
    from relate.config import load_config
    from relate.data.corpus import read_corpus
    from train_jobs.relation_config import TrainRelationConfig
    from train_jobs.relation_data import DecodeStage, build_space
    from train_jobs.relation_worker import TrainRunner

    cfg = load_config(TrainRelationConfig, RECIPE, [f"data.corpus_root={root}", f"data.cache_dir={root / 'cache'}",
                                                    *overrides])
    key = cfg.data.model_dump_json()
    if key not in _SPACES:  # the text encoder's work, shared by the arms that share a data config
        _SPACES[key] = build_space(cfg.data, cfg.model.text_dim)
    space = _SPACES[key]
    table = read_corpus(root, "train").slice(0, cfg.optim.batch_size)
    stage = DecodeStage(cfg.model.backbone.img_size, cfg.data, space["forms"], space["categories"],
                        seed=cfg.run.seed, sources=space["sources"], keep_aspect=cfg.model.backbone.keep_aspect)
    batch = {k: torch.from_numpy(v) for k, v in stage(table).items()}
    out: dict = {"batch": {k: _fingerprint(k, v) + [v.numel()] for k, v in batch.items()}, "steps": []}
    was = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        runner = TrainRunner(cfg, space, cfg.optim.max_steps)
        params = dict(runner.raw.named_parameters())
        for _ in range(STEPS):
            before = {k: p.detach().clone() for k, p in params.items()}
            m = runner.train_step(batch)
            out["steps"].append({
                "loss": {k[5:]: v for k, v in m.items() if k.startswith("loss/")},
                "grad_norm": m["grad_norm"], "rung_side": m["rung_side"],
                "grad": {k: _fingerprint(k, p.grad) + [p.numel()] for k, p in params.items() if p.grad is not None},
                "update": {k: _fingerprint(k, p.detach() - before[k]) + [p.numel()] for k, p in params.items()}})
    finally:
        torch.set_num_threads(was)
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("step_world")
    _world(root)
    return root


def _compare(where: str, got: dict, want: dict) -> list[str]:
    """Each tensor's fingerprint against the recorded one. The scale floor is 3% of the largest
    tensor's norm: some gradients are zero up to round-off (a key bias under a softmax), and the update
    AdamW makes of such a gradient is round-off too, a few percent of its own tiny norm."""
    if sorted(got) != sorted(want):
        return [f"{where}: tensors {sorted(set(got) ^ set(want))} appear on one side only"]
    floor = 3e-2 * max((abs(w[1]) for w in want.values()), default=0.0)
    rtol = RTOL_UPDATE if where.endswith("update") else RTOL
    return [f"{where}/{k}: {np.round(got[k][:4], 9).tolist()} against {np.round(w[:4], 9).tolist()}"
            for k, w in want.items() if not _close(got[k][:4], w[:4], int(w[4]), floor, rtol)]


@pytest.mark.parametrize("arm", sorted(ARMS))
def test_a_fixed_seed_cpu_long_step_keeps_its_numbers(world, arm):
    want = json.loads(GOLDEN.read_text())[arm]
    got = run_arm(world, ARMS[arm])
    bad = _compare("batch", got["batch"], want["batch"])
    for i, (g, w) in enumerate(zip(got["steps"], want["steps"])):
        assert g["rung_side"] == w["rung_side"]
        assert sorted(g["loss"]) == sorted(w["loss"])
        bad += [f"step {i} loss/{k}: {g['loss'][k]!r} against {v!r}" for k, v in w["loss"].items()
                if abs(g["loss"][k] - v) > RTOL * max(abs(v), 1e-3)]
        if abs(g["grad_norm"] - w["grad_norm"]) > RTOL * w["grad_norm"]:
            bad.append(f"step {i} grad_norm: {g['grad_norm']!r} against {w['grad_norm']!r}")
        bad += _compare(f"step {i} grad", g["grad"], w["grad"]) + _compare(f"step {i} update", g["update"], w["update"])
    assert len(got["steps"]) == len(want["steps"]) == STEPS
    assert not bad, f"{len(bad)} figures moved:\n" + "\n".join(bad[:40])


def test_the_comparison_sees_a_changed_step(world):
    """The tolerance is tight enough to catch a small change: one loss weight moved by 1%."""
    want = json.loads(GOLDEN.read_text())["recipe"]
    got = run_arm(world, ["loss.grounding=0.101"])
    assert _compare("step 0 grad", got["steps"][0]["grad"], want["steps"][0]["grad"])
    assert abs(got["steps"][0]["loss"]["grounding"] - want["steps"][0]["loss"]["grounding"]) > \
        RTOL * abs(want["steps"][0]["loss"]["grounding"])
    # and an update's looser tolerance still sees the head's learning rate moved by 1%
    got = run_arm(world, ["optim.lr_head=2.02e-3"])
    assert not _compare("step 0 grad", got["steps"][0]["grad"], want["steps"][0]["grad"])
    assert _compare("step 0 update", got["steps"][0]["update"], want["steps"][0]["update"])


def _dumps(tree) -> str:
    """JSON with one line per tensor's fingerprint (8 significant digits: the tolerance is 2e-4)."""
    def short(x):
        if isinstance(x, float):
            return float(f"{x:.8g}")
        if isinstance(x, dict):
            return {k: short(v) for k, v in x.items()}
        return [short(v) for v in x] if isinstance(x, list) else x

    text = json.dumps(short(tree), indent=1, sort_keys=True)
    return re.sub(r"\[\s+([^\[\]{}]*?)\s+\]", lambda m: "[" + " ".join(m.group(1).split()) + "]", text)


if __name__ == "__main__":
    import sys
    import tempfile

    if sys.argv[1:] != ["--record"]:
        raise SystemExit(f"usage: python {Path(__file__).name} --record  (rewrites {GOLDEN.name})")
    with tempfile.TemporaryDirectory() as d:
        _world(Path(d))
        golden = {arm: run_arm(Path(d), ov) for arm, ov in ARMS.items()}
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(_dumps(golden) + "\n")
    print(f"wrote {GOLDEN}")
