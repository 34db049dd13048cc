"""relate.metrics.truth_intervals: intervals over seeds and images, against hand-worked cases."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import average_precision_score

from relate.metrics.truth import ImageCells, score_against_truth
from relate.metrics.truth_intervals import (TruthKit, load_kit, paired_gap_intervals, save_kit,
                                            seed_image_intervals, truth_kit)

pytestmark = pytest.mark.unit


def _topk_kit(values) -> TruthKit:
    return TruthKit(len(values), {}, np.asarray(values, float), 10)


def test_two_seeds_two_images_match_the_hand_worked_distribution():
    """Seed 0 scores images (1.0, 0.0), seed 1 (1.0, 0.5). Image draws (2,0) (1,1) (0,2) have
    probability 1/4, 1/2, 1/4; seed draws (0,0) (0,1) (1,0) (1,1) 1/4 each. A replicate is the mean
    over its drawn seeds of each seed's mean on its drawn images, so its distribution is
        0.0: 1/16, 0.25: 2/16, 0.5: 3/16, 0.625: 4/16, 0.75: 2/16, 1.0: 4/16
    (CDF .0625, .1875, .375, .625, .75, 1). Its 10th and 90th percentiles are 0.25 and 1.0, its 20th
    and 80th 0.5 and 1.0; the estimate is the mean over seeds on both images, (0.5 + 0.75) / 2."""
    kits = [_topk_kit([1.0, 0.0]), _topk_kit([1.0, 0.5])]
    at80 = seed_image_intervals(kits, resamples=20000, seed=3, confidence=0.8)["top10_precision"]
    assert (at80.mean, at80.low, at80.high) == (0.625, 0.25, 1.0)
    assert at80.per_seed == (0.5, 0.75)
    at60 = seed_image_intervals(kits, resamples=20000, seed=3, confidence=0.6)["top10_precision"]
    assert (at60.low, at60.high) == (0.5, 1.0)


def test_seeds_that_agree_on_every_image_leave_only_the_images_spread():
    """One image all wrong, one right, for all three seeds: the Student-t interval over seeds is a
    point; the image draw still spans 0 to 1 (each image alone has probability 1/4)."""
    kits = [_topk_kit([0.0, 1.0])] * 3
    iv = seed_image_intervals(kits, resamples=4000, seed=0, confidence=0.95)["top10_precision"]
    assert iv.mean == 0.5 and iv.low == 0.0 and iv.high == 1.0


def _cells(rng, n_boxes=4):
    pairs = np.array([(i, j) for i in range(n_boxes) for j in range(n_boxes) if i != j])
    truth = frozenset((int(i), int(j), c) for (i, j) in pairs for c in ("a", "b", "c") if rng.random() < 0.3)
    return ImageCells(pairs[:-2], rng.normal(size=(len(pairs) - 2, 3)), n_boxes, truth)  # two pairs unscored


def test_figures_on_all_images_equal_the_truth_report():
    rng = np.random.default_rng(0)
    imgs = [_cells(rng) for _ in range(12)]
    fam = {"a": "f1", "b": "f1", "c": "f2"}
    rep = score_against_truth(imgs, ["a", "b", "c"], fam, k=3)
    figs = truth_kit(imgs, ["a", "b", "c"], fam, k=3).figures()
    assert figs["family/f1_ap"] == pytest.approx(rep.family_ap["f1"])
    assert figs["family/f2_ap"] == pytest.approx(rep.family_ap["f2"])
    assert figs["top3_precision"] == pytest.approx(rep.topk_precision)


def test_an_ap_replicate_is_sklearns_weighted_ap_and_intervals_stay_in_range(tmp_path):
    rng = np.random.default_rng(1)
    imgs = [_cells(rng) for _ in range(10)]
    fam = {"a": "f", "b": "f", "c": "f"}
    kit = truth_kit(imgs, ["a", "b", "c"], fam, k=5)
    img, sc, lab = kit.families["f"]
    w = np.bincount(np.random.default_rng(7).integers(0, 10, 10), minlength=10).astype(float)
    from relate.metrics.truth_intervals import _draws

    got = _draws(kit, w[None])["family/f_ap"][0]
    keep = w[img] > 0
    assert got == pytest.approx(average_precision_score(lab[keep], sc[keep], sample_weight=w[img][keep]))
    save_kit(kit, tmp_path / "k.npz")
    again = load_kit(tmp_path / "k.npz")
    ivs = seed_image_intervals([kit, again], resamples=300, seed=0)
    for iv in ivs.values():
        assert 0.0 <= iv.low <= iv.mean <= iv.high <= 1.0


def test_a_paired_gap_cancels_the_images():
    """Arm b is arm a shifted by +0.25 on every image: the gap is 0.25 under every draw."""
    a = [_topk_kit([0.0, 0.5, 0.25]), _topk_kit([0.25, 0.5, 0.0])]
    b = [_topk_kit([0.25, 0.75, 0.5]), _topk_kit([0.5, 0.75, 0.25])]
    gap = paired_gap_intervals(a, b, resamples=500, seed=0)["top10_precision"]
    assert gap.mean == pytest.approx(0.25) and gap.low == pytest.approx(0.25) and gap.high == pytest.approx(0.25)


def test_seeds_scored_on_different_images_are_refused():
    with pytest.raises(ValueError, match="same images"):
        seed_image_intervals([_topk_kit([1.0]), _topk_kit([1.0, 0.0])])
