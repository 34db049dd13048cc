"""The recipe ablation's table: Student-t intervals over seeds and paired differences to the full
recipe, checked against scipy.stats and hand arithmetic."""

from __future__ import annotations

import json
import math

import pytest
from scipy import stats

from train_jobs.ablate_recipe import (_world_fields, checkpoint_candidates, load_saved, mean_interval, rescore,
                                      run_settings, shared_pair_shares, tabulate)


def test_mean_interval_matches_scipy_t_interval():
    vals = [0.30, 0.34, 0.29, 0.35]
    m, lo, hi = mean_interval(vals)
    ref = stats.t.interval(0.95, len(vals) - 1, loc=sum(vals) / 4, scale=stats.sem(vals))
    assert m == pytest.approx(0.32) and (lo, hi) == pytest.approx(ref)
    one = mean_interval([0.5])
    assert one[0] == 0.5 and math.isnan(one[1]) and math.isnan(one[2])


def test_mean_interval_stays_inside_the_figures_range():
    # three seeds near 1.0: mean 0.99, sd 0.01, half-width t(0.975, 2) * 0.01 / sqrt(3) = 0.0248
    vals = [1.0, 0.99, 0.98]
    m, lo, hi = mean_interval(vals)
    half = stats.t.ppf(0.975, 2) * 0.01 / math.sqrt(3)
    assert hi == pytest.approx(0.99 + half) and hi > 1.0  # unbounded, it runs past the range
    assert mean_interval(vals, within=(0.0, 1.0)) == pytest.approx((0.99, 0.99 - half, 1.0))
    # and at the other end, a difference of two rates stays >= -1
    assert mean_interval([-1.0, -0.9, -0.95], within=(-1.0, 1.0))[1] == -1.0


def test_differences_are_paired_by_seed():
    k = "model/syn/mR@50"
    runs = {"full": {0: {k: 0.50}, 1: {k: 0.40}}, "neither": {0: {k: 0.45}, 1: {k: 0.36}}}
    summary, table = tabulate(runs, [k])
    d = summary["neither"][k]
    assert d["diff"] == pytest.approx(-0.045)  # (-0.05 - 0.04) / 2, seed by seed
    # paired: the spread of the differences (0.005), not of the arms (0.05), sets the interval
    assert d["diff_hi"] - d["diff_lo"] == pytest.approx(2 * stats.t.ppf(0.975, 1) * 0.005)
    assert "diff" not in summary["full"][k]
    assert table.splitlines()[0] == "| arm | mR@50 |" and "(-0.045)" in table.splitlines()[3]


def test_world_fields_keep_only_the_world_settings(tmp_path):
    p = tmp_path / "w.yaml"
    p.write_text("out_dir: /x\nmulti_label: 0.3\nsources:\n  - {name: a, share: 1.0, families: null}\n")
    assert _world_fields(str(p)) == {"multi_label": 0.3, "sources": [{"name": "a", "share": 1.0, "families": None}]}


def test_finished_runs_are_reused_only_under_the_same_settings(tmp_path):
    a = run_settings(["run.storage_path=/x/train", "run.name=full-seed0", "run.seed=0", "loss.pu_discount=true"])
    b = run_settings(["run.storage_path=/y/train", "run.name=other", "loss.pu_discount=true", "run.seed=0"])
    assert a == b == ["loss.pu_discount=true", "run.seed=0"]  # storage and name do not change the figures
    f = tmp_path / "full-seed0.json"
    assert load_saved(f, a) is None
    saved = {"settings": a, "test": {"model/syn/mR@50": 0.5}, "checkpoint": "/x/train/full-seed0/checkpoint_1"}
    f.write_text(json.dumps(saved))
    assert load_saved(f, a) == saved
    assert load_saved(f, run_settings(["run.seed=0", "loss.pu_discount=false"])) is None


def _ckpt(tmp_path, run: str, name: str) -> str:
    d = tmp_path / "train" / run / name
    d.mkdir(parents=True)
    return str(d)


def test_a_kept_run_is_scored_again_only_from_a_checkpoint_that_reproduces_it(tmp_path):
    """The newest checkpoint of the run's folder is an earlier run's (other weights): its figures
    differ, so it is passed over for the one that reproduces every kept figure."""
    old = _ckpt(tmp_path, "full-seed0-20261201-050000-aaaaaa", "checkpoint_2026-12-01_05-02-00")
    new = _ckpt(tmp_path, "full-seed0-20261201-060000-bbbbbb", "checkpoint_2026-12-01_06-02-00")
    _ckpt(tmp_path, "full-seed01-20261201-070000-cccccc", "checkpoint_2026-12-01_07-02-00")  # seed 01, not 0
    saved = {"settings": [], "test": {"model/syn/mR@50": 0.5}}
    cands = checkpoint_candidates(saved, tmp_path / "train", "full-seed0")
    assert cands == [new, old]  # newest first, and seed 01's folder is not seed 0's
    figures = {new: {"model/syn/mR@50": 0.6, "model/syn_nogc/mR@50": 0.9},
               old: {"model/syn/mR@50": 0.5, "model/syn_nogc/mR@50": 0.7}}
    scored: list[str] = []
    test, ckpt = rescore(saved, cands, lambda c: scored.append(c) or figures[c])
    assert ckpt == old and test == {"model/syn/mR@50": 0.5, "model/syn_nogc/mR@50": 0.7}
    assert scored == [new, old]
    # the recorded checkpoint is tried first; none reproducing means the run is trained again
    assert checkpoint_candidates({**saved, "checkpoint": old}, tmp_path / "train", "full-seed0")[0] == old
    assert rescore({"test": {"model/syn/mR@50": 0.4}}, cands, lambda c: figures[c]) is None
    assert rescore(saved, [str(tmp_path / "gone")], lambda c: figures[c]) is None  # a missing folder is skipped


def test_shared_pair_shares_count_relations_whose_pair_has_another_predicate():
    images = [[{"subject": 0, "object": 1, "predicate": "left of"}, {"subject": 0, "object": 1, "predicate": "near"},
               {"subject": 1, "object": 0, "predicate": "near"}, {"subject": 2, "object": 3, "predicate": "part of"}],
              [{"subject": 0, "object": 1, "predicate": "near"}]]  # same indices, another image: not shared
    fam = {"left of": "spatial", "near": "proximity", "part of": "part"}
    assert shared_pair_shares(images, fam.__getitem__) == {"part": (1, 0), "proximity": (3, 1), "spatial": (1, 1)}
