"""Each loss term on a hand-computed case (seed 001, § 3.3, App. B.1, Eq. 3 and Eq. 5)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from relate.losses import (
    background_loss, focal_loss, geometry_bce_loss, grounding_loss, infonce_loss, pu_negative_logweights,
    relatedness_weights, sigmoid_aux_loss, swap_hinge_loss, fit_synonym_weighting,
)

T = torch.tensor


def test_infonce_single_positive_matches_softmax_cross_entropy():
    logits = T([[2.0, 0.0, 1.0]])
    loss = infonce_loss(logits, T([[1.0, 0.0, 0.0]]), torch.zeros(1, 3))
    assert loss.item() == pytest.approx(-2 + math.log(math.exp(2) + 1 + math.exp(1)), abs=1e-6)


def test_infonce_group_positives_are_a_weighted_mean_and_do_not_compete():
    logits = T([[2.0, 0.0, 1.0]])
    loss = infonce_loss(logits, T([[1.0, 0.0, 0.5]]), torch.zeros(1, 3))
    l0 = math.log(math.exp(2) + 1) - 2  # positive 0 against the single negative (col 1)
    l2 = math.log(math.exp(1) + 1) - 1
    assert loss.item() == pytest.approx((l0 + 0.5 * l2) / 1.5, abs=1e-6)


def test_infonce_discounted_and_masked_negatives():
    logits = T([[2.0, 0.0, 1.0]])
    logw = T([[0.0, math.log(0.1), float("-inf")]])  # Eq. 3 discount on col 1, col 2 masked out
    loss = infonce_loss(logits, T([[1.0, 0.0, 0.0]]), logw)
    assert loss.item() == pytest.approx(math.log(math.exp(2) + 0.1) - 2, abs=1e-6)


def test_infonce_skips_rows_without_positive_and_has_gradient():
    logits = T([[2.0, 0.0], [5.0, 1.0]], requires_grad=True)
    loss = infonce_loss(logits, T([[1.0, 0.0], [0.0, 0.0]]), torch.zeros(2, 2))
    assert loss.item() == pytest.approx(math.log(math.exp(2) + 1) - 2, abs=1e-6)
    loss.backward()
    assert logits.grad[1].abs().sum() == 0 and logits.grad[0, 0] < 0


def test_pu_discount_exempts_annotated_and_inverse_and_combines_independently():
    p = torch.zeros(3, 3)
    p[0, 1], p[0, 2], p[1, 2] = 0.5, 0.9, 0.5
    inverse = torch.zeros(3, 3, dtype=torch.bool)
    inverse[0, 2] = True
    w = pu_negative_logweights(T([[True, False, False]]), p, inverse)
    assert w[0].tolist() == pytest.approx([0.0, math.log(0.5), 0.0])  # inverse keeps full weight
    w2 = pu_negative_logweights(T([[True, True, False]]), p, torch.zeros(3, 3, dtype=torch.bool))
    assert w2[0].tolist() == pytest.approx([0.0, 0.0, math.log(0.1 * 0.5)], abs=1e-5)


def test_pu_discount_source_mask_removes_unannotatable_negatives():
    allowed = T([[True, True, False]])
    w = pu_negative_logweights(T([[True, False, False]]), torch.zeros(3, 3), torch.zeros(3, 3, dtype=torch.bool),
                               allowed)
    assert w[0, :2].tolist() == [0.0, 0.0] and w[0, 2] == float("-inf")


def test_sigmoid_aux_balances_negative_mass_to_positive_mass():
    loss = sigmoid_aux_loss(torch.zeros(1, 3), T([[True, False, False]]), T([[False, True, True]]))
    assert loss.item() == pytest.approx(math.log(2), abs=1e-6)  # (1 + 0.5 + 0.5) log2 / (2 * 1)
    logits = T([[3.0, -1.0, 0.0]])
    bce = torch.nn.functional.binary_cross_entropy_with_logits
    expect = (bce(T(3.0), T(1.0)) + 0.5 * bce(T(-1.0), T(0.0)) + 0.5 * bce(T(0.0), T(0.0))) / 2
    assert sigmoid_aux_loss(logits, T([[True, False, False]]), T([[False, True, True]])).item() == pytest.approx(expect.item(), abs=1e-6)


def test_swap_hinge_eq5_weighted_by_p_directional():
    loss = swap_hinge_loss(T([0.3, 0.1]), T([0.1, 0.3]), T([1.0, 0.5]), margin=0.05)
    assert loss.item() == pytest.approx((0.0 + 0.5 * 0.25) / 2, abs=1e-6)
    assert swap_hinge_loss(T([0.1]), T([0.3]), T([0.0])).item() == 0.0  # symmetric predicate: no term


def test_background_suppression_takes_top_k_sigmoid():
    loss = background_loss(T([[0.0, 10.0, -10.0]]), k=2)
    assert loss.item() == pytest.approx((1 / (1 + math.exp(-10)) + 0.5) / 2, abs=1e-6)
    assert background_loss(torch.zeros(0, 3), k=2).item() == 0.0


def test_grounding_is_cross_entropy_over_category_cosines():
    emb = T([[1.0, 0.0]])
    cats = T([[1.0, 0.0], [0.0, 1.0]])
    loss = grounding_loss(emb, cats, T([0]), scale=10.0)
    assert loss.item() == pytest.approx(-10 + math.log(math.exp(10) + 1), abs=1e-5)


def test_geometry_bce_only_on_valid_candidates():
    loss = geometry_bce_loss(T([[0.0, 100.0]]), T([[True, False]]), T([[True, False]]))
    assert loss.item() == pytest.approx(math.log(2), abs=1e-6)


def test_focal_loss_hand_values():
    ce = math.log(2)
    assert focal_loss(T([0.0]), T([1]), T([1.0]), gamma=2.0).item() == pytest.approx(0.25 * ce, abs=1e-6)
    assert focal_loss(T([0.0, 0.0]), T([1, 0]), T([1.0, 0.0]), gamma=0.0).item() == pytest.approx(ce, abs=1e-6)


def test_relatedness_weights_floor_and_annotated():
    w = relatedness_weights(T([False, False, True]), T([0.9, 0.2, 0.9]), floor=0.3)
    assert w.tolist() == pytest.approx([0.3, 0.8, 1.0])


def test_isotonic_synonym_weights_are_monotone_in_cosine():
    rng = np.random.default_rng(0)
    cos = rng.uniform(-1, 1, 500)
    is_syn = rng.uniform(size=500) < (cos + 1) / 2
    iso = fit_synonym_weighting(cos, is_syn)
    grid = iso.predict(np.linspace(-1, 1, 21))
    assert np.all(np.diff(grid) >= 0) and grid[-1] > grid[0]
    with pytest.raises(ValueError):
        fit_synonym_weighting(np.zeros(3), np.zeros(2))
