"""The distilled student against its acceptance bars (relate.text.distill_data.ACCEPTANCE), on the
trained groups and on inverse pairs held out as whole synonym groups (relate.text.heldout).

A CI-sized student is distilled in this process with the shipped recipe
(train_jobs/configs/distill_text.yaml) on fewer strings and epochs: the same DistillRunner steps a
Ray Train worker takes, the packaged MiniLM teacher, the same group split. Bars the student does
not reach are marked xfail(strict=True) with the numbers measured when the mark was set, so the
shortfall is stated rather than hidden by a lower bar, and a bar that starts passing (a better
recipe, or held-out groups leaking into training) fails the run until the mark is removed.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from relate.config import load_config
from relate.text.distill_data import ACCEPTANCE

CONFIG = Path(__file__).resolve().parents[2] / "train_jobs" / "configs" / "distill_text.yaml"
CI_SIZE = ["data.train_vocab_size=1000", "train.epochs=8", "train.torch_threads=2"]

# (split, bar) -> what was measured at CI_SIZE when the mark was set (2026-12-01, recipe with loss.spread 4,
# kl_temperature 0.2, antonym_margin -1.0) (split_seed 0: held-out groups biting, chased_by, following, has_part,
# owned_by, used_by, wearing and their inverses). Passing now, so unmarked: every trained bar (AUC 1.000, inv cos
# -0.82, syn cos 0.77, eff. dim 50.1 against the teacher's 63.6), held-out inv cos 0.25 and held-out eff. dim.
SHORT = {
    ("held-out", "auc"): "AUC 0.584 (teacher 0.230; bar >= 0.97): inverse cosines run from -0.54 (biting / bitten "
                         "by) to +0.60 (owns / owned by), synonym cosines average only 0.35",
    ("held-out", "syn_cos"): "syn cos 0.35 (teacher 0.49; bar > 0.6): cohesion does not transfer to unseen groups",
}


@pytest.fixture(scope="module")
def distilled():
    from relate.text.distill_data import evaluate_text_spaces, prepare_distill_data
    from relate.text.student import save_student
    from train_jobs.distill_text import DistillTextConfig, fit_local

    cfg = load_config(DistillTextConfig, CONFIG, CI_SIZE)
    d = cfg.data
    data, info = prepare_distill_data(cfg.model.teacher, cfg.model.dim, d.train_vocab_size, d.heldout_fraction,
                                      d.split_seed, d.dehub_components, d.heldout_groups)
    runner = fit_local(cfg, data)
    with tempfile.TemporaryDirectory() as tmp:
        save_student(tmp, runner.model, cfg.model.teacher)
        reports, markdown, acceptance = evaluate_text_spaces(cfg.model.teacher, f"student:{tmp}", info["split"])
    print(markdown)
    return reports, acceptance, info


def _measured(reports: dict, split: str) -> str:
    s, t = reports[f"student/{split}"], reports[f"teacher/{split}"]
    return (f"student AUC {s['auc_syn_inv']:.3f}, inv cos {s['inv_cos']:.2f}, syn cos {s['syn_cos']:.2f}, "
            f"eff. dim {s['eff_dim']:.1f} (teacher {t['eff_dim']:.1f}, AUC {t['auc_syn_inv']:.3f}, "
            f"inv cos {t['inv_cos']:.2f}, syn cos {t['syn_cos']:.2f})")


_CASES = [pytest.param(split, bar, marks=[pytest.mark.xfail(strict=True, reason=f"below the bar at CI size: "
                                                                                 f"{SHORT[(split, bar)]}")]
                       if (split, bar) in SHORT else [])
          for split in ("trained", "held-out") for bar in ("auc", "inv_cos", "syn_cos", "eff_dim")]


@pytest.mark.slow  # teacher pass over 1,000 strings + 8 epochs + two 583-string banks: ~90-125 s on 2 cores
@pytest.mark.parametrize("split,bar", _CASES)
def test_student_acceptance_bar(distilled, split, bar):
    reports, acceptance, info = distilled
    assert info["heldout_groups"], "the split must hold out at least one pair of groups"
    assert acceptance[split][bar], f"{split} groups miss the {bar} bar ({ACCEPTANCE}): {_measured(reports, split)}"


@pytest.mark.slow
def test_repulsion_reaches_held_out_groups(distilled):
    """Not a bar: a guard that what the student learns on trained groups moves unseen groups too."""
    reports, _, _ = distilled
    s, t = reports["student/held-out"], reports["teacher/held-out"]
    assert s["auc_syn_inv"] > t["auc_syn_inv"] + 0.2, _measured(reports, "held-out")
    assert s["inv_cos"] < t["inv_cos"] - 0.1, _measured(reports, "held-out")
