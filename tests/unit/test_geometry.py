import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from relate import geometry as G

coord = st.floats(0, 500, allow_nan=False)


@st.composite
def boxes(draw):
    x1, y1 = draw(coord), draw(coord)
    w, h = draw(st.floats(1, 300)), draw(st.floats(1, 300))
    return np.array([x1, y1, x1 + w, y1 + h])


def test_hand_computed_values():
    a, b = np.array([0.0, 0, 10, 10]), np.array([5.0, 5, 15, 15])
    assert G.intersection_area(a, b) == pytest.approx(25)
    assert G.iou(a, b) == pytest.approx(25 / 175, rel=1e-5)
    assert G.containment(a, b) == pytest.approx(0.25, rel=1e-5)
    c = np.array([13.0, 14, 20, 20])
    assert G.gap(a, c) == pytest.approx(5.0)  # 3 across, 4 down
    assert not G.touch(a, c) and G.touch(a, c, tol=5.0)
    assert G.touch(a, np.array([10.0, 0, 12, 3]))  # shared edge
    np.testing.assert_allclose(G.union_box(a, c), [0, 0, 20, 20])
    np.testing.assert_allclose(G.contact_box(a, c), [10, 10, 13, 14])  # the gap between them
    np.testing.assert_allclose(G.contact_box(a, b), [5, 5, 10, 10])  # the overlap


def test_pairwise_broadcasting():
    bx = np.array([[0, 0, 10, 10], [5, 5, 15, 15], [20, 20, 30, 30.0]])
    m = G.iou(bx[:, None], bx[None])
    assert m.shape == (3, 3)
    np.testing.assert_allclose(np.diag(m), 1.0, atol=1e-6)
    assert m[0, 2] == 0


@settings(max_examples=200, deadline=None)
@given(boxes(), boxes(), st.floats(0.05, 20), st.floats(-300, 300), st.floats(-300, 300))
def test_pair_features_scale_and_translation_invariant(a, b, s, tx, ty):
    f = G.pair_features(a, b)
    shift = np.array([tx, ty, tx, ty])
    g = G.pair_features(a * s + shift, b * s + shift)
    assert f.shape == (G.N_PAIR_FEATURES,)
    np.testing.assert_allclose(f, g, rtol=1e-4, atol=1e-4)


@settings(max_examples=200, deadline=None)
@given(boxes(), boxes())
def test_symmetries_and_swap(a, b):
    assert G.iou(a, b) == pytest.approx(G.iou(b, a))
    assert G.gap(a, b) == pytest.approx(G.gap(b, a))
    assert 0.0 <= G.containment(a, b) <= 1.0 + 1e-6
    f, r = G.pair_features(a, b), G.pair_features(b, a)
    n = dict(zip(G.PAIR_FEATURE_NAMES, range(19)))
    for k in ("log_w_ratio", "log_h_ratio", "dx_union", "dy_union"):
        assert f[n[k]] == pytest.approx(-r[n[k]], abs=1e-6)
    for x, y in (("inter_over_subject", "inter_over_object"), ("log_aspect_subject", "log_aspect_object"),
                 ("subject_over_union", "object_over_union")):
        assert f[n[x]] == pytest.approx(r[n[y]], abs=1e-6)
    for k in ("iou", "gap_x_union", "gap_y_union"):
        assert f[n[k]] == pytest.approx(r[n[k]], abs=1e-6)
    np.testing.assert_array_equal(f[15:], [1, 1, 0, 0])  # mask slots are constant for boxes


def test_numpy_and_torch_agree():
    rng = np.random.default_rng(0)
    xy = rng.uniform(0, 100, (50, 2))
    a = np.concatenate([xy, xy + rng.uniform(1, 50, (50, 2))], 1)
    b = a[::-1].copy()
    fn = G.pair_features(a, b)
    ft = G.pair_features(torch.tensor(a), torch.tensor(b)).numpy()
    np.testing.assert_allclose(fn, ft, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(G.contact_box(a, b), G.contact_box(torch.tensor(a), torch.tensor(b)).numpy())


def test_mask_slots_describe_shape():
    m = np.zeros((20, 20), bool)
    m[2:8, 2:8] = True
    box = np.array([2.0, 2, 8, 8])
    f = G.mask_features(m, m, box, box)
    np.testing.assert_allclose(f, [1, 1, 0, 0], atol=1e-5)
    tri = np.tril(np.ones((6, 6), bool))
    m2 = np.zeros((20, 20), bool)
    m2[2:8, 2:8] = tri
    assert G.mask_features(m2, m, box, box)[0] == pytest.approx(21 / 36)
