"""Chance correction and the OVS composite, including a check against the paper's Tab. 3 / 21."""

from __future__ import annotations

import math

import pytest

from relate.metrics import chance_correct, composite, harmonic_mean, leave_one_axis_out, ratio_to_reference, recall_chance


def test_chance_correction_floors_and_clips():
    assert chance_correct(0.5, 0.5) == 0.0
    assert chance_correct(0.66, 0.5) == pytest.approx(0.32)      # AUC 0.66 is 0.32 above its floor
    assert chance_correct(0.22, recall_chance(50)) == pytest.approx((0.22 - 0.02) / 0.98)
    assert chance_correct(0.3, 0.5) == 0.0 and chance_correct(1.2, 0.1) == 1.0
    assert ratio_to_reference(0.2, 0.696) == pytest.approx(0.2874, abs=1e-4)
    assert ratio_to_reference(1.03, 1.0) == 1.0
    with pytest.raises(ValueError):
        chance_correct(0.5, 1.0)
    with pytest.raises(ValueError):
        ratio_to_reference(0.5, 0.0)


def test_composite_hand_computed():
    c = composite({"A1": 0.2, "A2": 0.4, "A4": 0.4, "A6": 0.8, "A3": 0.9})  # A3 is reported, never summed
    assert c.axis_set == ["A1", "A2", "A4", "A6"]
    assert c.ovs == pytest.approx(4 / (5 + 2.5 + 2.5 + 1.25))
    assert c.arithmetic == pytest.approx(0.45)
    assert c.weakest_axis == "A1" and c.weakest_value == 0.2
    assert c.balance == pytest.approx(c.ovs / 0.45)
    assert c.leave_one_out["A1"] == pytest.approx(harmonic_mean([0.4, 0.4, 0.8]))
    with_a5 = composite({"A1": 0.2, "A2": 0.4, "A4": 0.4, "A5": 0.5, "A6": 0.8})
    assert with_a5.axis_set == ["A1", "A2", "A4", "A5", "A6"]
    assert composite({"A1": 0.0, "A2": 0.9}).ovs == 0.0  # one useless axis sinks the harmonic mean
    assert composite({"A1": 0.5, "A2": 0.5}).balance == pytest.approx(1.0)


def test_composite_rejects_uncorrected_axes_and_empty_sets():
    with pytest.raises(ValueError, match="chance-corrected"):
        composite({"A1": 36.9})
    with pytest.raises(ValueError, match="no axis"):
        composite({"A3": 0.5})


def test_reproduces_the_papers_composite_from_its_table_3_cells():
    # A1: F1@50 chance-corrected per benchmark (V = 50, 56, 117 predicates); IndoorVG taken at V = 37
    a1 = (chance_correct(.369, 1 / 50) + chance_correct(.347, 1 / 56) + chance_correct(.378, 1 / 37)
          + chance_correct(.187, 1 / 117)) / 4
    axes = {"A1": a1, "A2": chance_correct(.726, 2870 / 26044), "A4": ratio_to_reference(.200, .696),
            "A5": 0.67, "A6": chance_correct(.690, .5)}
    c = composite(axes)
    assert c.ovs == pytest.approx(0.401, abs=0.01)          # Tab. 3: 40.1
    assert c.leave_one_out["A4"] == pytest.approx(0.453, abs=0.01)  # Tab. 21: 45.3
    rows = leave_one_axis_out({"ours": axes, "other": {k: v / 2 for k, v in axes.items()}})
    assert rows[0]["withheld"] == "none" and len(rows) == 6
    assert all(r["ours"] > r["other"] for r in rows)
    assert not math.isnan(rows[-1]["ours"])
