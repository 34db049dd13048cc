"""Linear CKA against the Gram-matrix formula of Kornblith et al. (2019), its invariances, features
by depth of tiny relation models, and cross-image 1-NN retrieval on cases with a known answer."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import ortho_group

from relate.data.lexicon import all_surface_forms
from relate.data.synthetic import SyntheticConfig, make_scene
from relate.model.config import BackboneConfig, DeformableConfig, RelationModelConfig
from relate.model.model import create_relation_model
from relate.probe.model_inputs import batches_from_scenes
from relate.probe.representation import cka_by_depth, linear_cka, model_features, nn1_retrieval


def _cka_reference(x: np.ndarray, y: np.ndarray) -> float:
    """Kornblith et al. 2019, Eq. for linear CKA through HSIC of Gram matrices: K = X X^T, L = Y Y^T,
    H = I - 11^T / n, HSIC(K, L) = tr(K H L H) / (n - 1)^2, CKA = HSIC(K, L) / sqrt(HSIC(K, K) HSIC(L, L))."""
    n = x.shape[0]
    h = np.eye(n) - np.ones((n, n)) / n
    k, l = x @ x.T, y @ y.T
    hsic = lambda a, b: np.trace(a @ h @ b @ h) / (n - 1) ** 2  # noqa: E731
    return hsic(k, l) / np.sqrt(hsic(k, k) * hsic(l, l))


def test_cka_hand_worked_case():
    """X = four points on the axes of a square; Y keeps only the first coordinate. Centred already.
    X^T X = diag(2, 2), Y^T Y = [2], Y^T X = [2, 0]: CKA = 4 / (sqrt(8) * 2) = 1 / sqrt(2)."""
    x = np.array([[1.0, 0], [0, 1], [-1, 0], [0, -1]])
    y = x[:, :1]
    assert linear_cka(x, y) == pytest.approx(1 / np.sqrt(2))
    assert _cka_reference(x, y) == pytest.approx(1 / np.sqrt(2))


def test_cka_matches_the_gram_formula_and_its_invariances():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, 8))
    y = x @ rng.normal(size=(8, 5)) + 0.5 * rng.normal(size=(50, 5)) + 3.0  # offset: centring matters
    assert linear_cka(x, y) == pytest.approx(_cka_reference(x, y), rel=1e-10)
    assert linear_cka(x, x) == pytest.approx(1.0)
    q = ortho_group.rvs(8, random_state=1)
    assert linear_cka(x @ q * 7.5, y) == pytest.approx(linear_cka(x, y), rel=1e-10)
    assert linear_cka(x @ q, x) == pytest.approx(1.0)
    # not invariant to an anisotropic scaling: a test that would pass for any constant is no test
    assert abs(linear_cka(x * np.linspace(0.1, 10, 8), y) - linear_cka(x, y)) > 1e-3
    with pytest.raises(ValueError, match="same rows"):
        linear_cka(x, y[:10])
    with pytest.raises(ValueError, match="constant feature set"):
        linear_cka(np.ones((5, 2)), x[:5])


def _tiny(seed: int):
    torch.manual_seed(seed)
    cfg = RelationModelConfig(backbone=BackboneConfig(name="vit_tiny_patch16_224", img_size=32, depth=2, patch_size=8,
                                                      taps=[-2, -1]),
                              dim=32, heads=4, text_dim=16, pair_layers=1, joint_layers=1, scene_grid=2,
                              deformable=DeformableConfig(heads=4, points=2))
    return create_relation_model(cfg).eval()


def _batches(n: int = 4):
    strings = all_surface_forms()
    bank = torch.nn.functional.normalize(torch.randn(len(strings), 16, generator=torch.Generator().manual_seed(0)), dim=-1)
    scenes = [make_scene(i, SyntheticConfig(seed=0, min_size=64, max_size=80)) for i in range(n)]
    return batches_from_scenes(scenes, bank, strings, side=32, batch_size=2)


def test_cka_by_depth_of_a_checkpoint_with_itself_is_one_and_below_one_against_another():
    batches = _batches()
    a, b = _tiny(0), _tiny(1)
    fa = model_features(a, batches)
    same = cka_by_depth(fa, model_features(a, batches))
    assert set(same) == {"backbone.block0", "backbone.block1", "pair.encoder", "pair.layer0", "head.input"}
    assert all(v == pytest.approx(1.0, abs=1e-9) for v in same.values())
    other = cka_by_depth(fa, model_features(b, batches))
    assert all(v < 0.999 for v in other.values()), other
    n_edges = sum(len(r) for bt in batches for r in bt.relations)
    assert fa.depths["head.input"].shape == (n_edges, 32) and fa.contact.shape == (n_edges, 32)
    assert fa.depths["backbone.block0"].shape[0] == 4 * (1 + 16)  # 4 images x (class token + 4 x 4 patches)


def test_nn1_retrieval_known_answers():
    rng = np.random.default_rng(0)
    labels = np.repeat(["a", "b", "c"], 20)
    groups = np.tile(np.arange(10), 6)
    centres = rng.normal(size=(3, 16)) * 10
    clean = centres[np.searchsorted(["a", "b", "c"], labels)] + rng.normal(size=(60, 16))
    r = nn1_retrieval(clean, labels, groups)
    assert r.accuracy == 1.0 and r.chance_majority == pytest.approx(1 / 3) and r.chance_random == pytest.approx(1 / 3)
    # the only feature that separates the labels is one shared within each image: retrieval from
    # other images must not see it (a same-image neighbour would give 1.0)
    lab2 = np.array(["x", "y"])[groups % 2]
    feat = np.eye(10)[groups] * 5 + 0.01 * rng.normal(size=(60, 10))
    assert nn1_retrieval(feat, lab2, groups).accuracy < 0.7
    with pytest.raises(ValueError, match="at least two images"):
        nn1_retrieval(clean, labels, np.zeros(60))


def test_patch_selectivity_hand_worked():
    """A 1 x 4 patch grid, one box per patch. After removing the shared offset (5, 5) the tokens are
    subject (1, 0), partner (1, 1), another person (0, 1), an unrelated cup -(2, 2): cosines with the
    subject 1/sqrt2, 0 and -1/sqrt2. Class selectivity 0 - (-1/sqrt2); relation selectivity
    1/sqrt2 - (-1/sqrt2); the partner beats the other cup: win rate 1."""
    from relate.probe.representation import patch_selectivity

    tokens = np.array([[1.0, 0], [1, 1], [0, 1], [-2, -2]]) + 5.0  # the offset must be subtracted
    fmap = tokens.T.reshape(2, 1, 4)
    boxes = np.array([[2.0 * k, 0, 2.0 * k + 2, 8] for k in range(4)])
    cats = ["person", "cup", "person", "cup"]
    related = {(0, 1)}
    meta = [(boxes, cats, [(0, 1, 0)], lambda i, j: (i, j) not in related and (j, i) not in related)]
    r = patch_selectivity([fmap], meta, side=8.0)
    assert r.class_selectivity == pytest.approx(1 / np.sqrt(2))
    assert r.relation_selectivity == pytest.approx(np.sqrt(2))
    assert r.partner_win_rate == 1.0 and (r.class_queries, r.relation_queries, r.win_queries) == (1, 1, 1)
    related.add((3, 0))  # the cup is now related to the subject: no unrelated region is left
    assert patch_selectivity([fmap], meta, side=8.0).relation_queries == 0


def test_model_patch_selectivity_runs_on_a_tiny_model():
    from relate.probe.representation import model_patch_selectivity

    r = model_patch_selectivity(_tiny(0), _batches())
    assert r.relation_queries > 0 and np.isfinite(r.relation_selectivity)
