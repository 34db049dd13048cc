"""Lesion ladder and semantic-logit decomposition on tiny random relation models built so that the
answer is known."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from relate.data.lexicon import all_surface_forms
from relate.data.synthetic import SyntheticConfig, make_scene
from relate.model.config import BackboneConfig, DeformableConfig, RelationModelConfig
from relate.model.model import create_relation_model
from relate.probe.attribution import (edge_predictions, decompose_semantic_logit, edge_accuracy, lesion_ladder,
                                      variance_shares)
from relate.probe.model_inputs import batches_from_scenes
from relate.probe.representation import forced_rows


def _tiny(seed: int = 0, **kw):
    torch.manual_seed(seed)
    cfg = RelationModelConfig(backbone=BackboneConfig(name="vit_tiny_patch16_224", img_size=32, depth=2, patch_size=8,
                                                      taps=[-1]),
                              dim=32, heads=4, text_dim=16, pair_layers=1, joint_layers=1, scene_grid=2,
                              deformable=DeformableConfig(heads=4, points=2), **kw)
    m = create_relation_model(cfg).eval()
    with torch.no_grad():  # the deformable read starts gated shut; open it so the context term is all there
        for name, p in m.deformable.named_parameters():
            if "gate" in name:
                p.fill_(1.0)
    return m


def _batches(n: int = 6, batch_size: int = 3):
    strings = all_surface_forms()
    bank = torch.nn.functional.normalize(torch.randn(len(strings), 16, generator=torch.Generator().manual_seed(0)), dim=-1)
    scenes = [make_scene(i, SyntheticConfig(seed=0, min_size=64, max_size=80)) for i in range(n)]
    return batches_from_scenes(scenes, bank, strings, side=32, batch_size=batch_size)


def test_accuracy_hand_worked():
    """Edges of classes (0, 1, 1, 1, 2) predicted (0, 0, 1, 1, 2): micro 4/5; per class 1, 2/3, 1 -> macro 8/9."""
    a = edge_accuracy(np.array([0, 0, 1, 1, 2]), np.array([0, 1, 1, 1, 2]))
    assert (a.micro, a.macro, a.edges, a.classes) == (pytest.approx(0.8), pytest.approx(8 / 9), 5, 3)


def test_a_model_blind_to_pixels_loses_nothing_under_the_pixel_lesion():
    batches = _batches()
    seeing = _tiny()
    full, _ = edge_predictions(seeing, batches, None)
    shuffled, _ = edge_predictions(seeing, batches, "pixels")
    assert (full != shuffled).any()  # the lesion does reach a model that reads pixels
    blind = _tiny()
    with torch.no_grad():
        blind.proj.weight.zero_()  # every patch token is the bias: nothing downstream sees the image
    r = lesion_ladder(blind, batches)
    rows = {row["channel_removed"]: row for row in r.rows()}
    assert rows["pixels"]["micro_change"] == 0.0 and rows["pixels"]["macro_change"] == 0.0
    assert r.full.edges == sum(len(x) for b in batches for x in b.relations)


def test_lesions_of_channels_a_model_does_not_read_cost_nothing():
    batches = _batches()
    m = _tiny(1)
    d = m.cfg.dim
    base, _ = edge_predictions(m, batches, None)
    assert (base != edge_predictions(m, batches, "object_features")[0]).any()
    assert (base != edge_predictions(m, batches, "geometry")[0]).any()
    with torch.no_grad():
        m.pair_enc.proj[0].weight[:, :2 * d].zero_()  # the pair encoder no longer reads v_s, v_o
        m.pair_enc.geometry.net[-1].weight.zero_()  # MLP(g) is its bias whatever g is
    base, _ = edge_predictions(m, batches, None)
    np.testing.assert_array_equal(base, edge_predictions(m, batches, "object_features")[0])
    np.testing.assert_array_equal(base, edge_predictions(m, batches, "geometry")[0])
    with pytest.raises(ValueError, match="at least 2 images"):
        lesion_ladder(m, _batches(2, batch_size=1), ["pixels"])
    with pytest.raises(ValueError, match="unknown lesion 'ears'"):
        lesion_ladder(m, batches, ["ears"])


def test_decomposition_parts_sum_to_the_semantic_logit():
    batches = _batches()
    m = _tiny(2, occlusion_cue="tokens")
    dec = decompose_semantic_logit(m, batches)
    # reference: the model's own cosines, tau and gate, nothing from the decomposition
    want = []
    with torch.no_grad():
        for b in batches:
            out = m(b.images, b.boxes, b.box_valid, b.bank, force=b.force)
            bi, ki = forced_rows(out.pairs, out.sampled.valid, b.relations)
            want.append((m.head.tau * (1 - m.head.gate(b.bank)) * out.scores.cos_sem[bi, ki]).flatten())
    want = torch.cat(want).double().numpy()
    np.testing.assert_allclose(dec.logit, want, atol=1e-5)
    total = sum(dec.parts.values())
    assert dec.max_residual < 2e-5 and np.abs(total - want).max() < 2e-5
    for name in ("subject", "object", "union", "contact", "geometry", "cues", "context", "encoder_bias", "head_bias"):
        assert np.abs(dec.parts[name]).max() > 1e-4, name  # each part carries something: none can be dropped
    shares = dec.shares()
    assert sum(shares.values()) == pytest.approx(1.0, abs=1e-6)  # exact up to the fp32 residual of the parts
    # a pair encoder that ignores the subject feature gives an identically zero subject part
    with torch.no_grad():
        m.pair_enc.proj[0].weight[:, :m.cfg.dim].zero_()
    dec0 = decompose_semantic_logit(m, batches)
    assert np.abs(dec0.parts["subject"]).max() == 0.0 and dec0.max_residual < 2e-5


def test_variance_shares_hand_worked():
    """logit = a + b with a = (1, 2, 3), b = (0, 0, 3), so l = (1, 2, 6). Centred: l_c = (-2, -1, 3),
    a_c = (-1, 0, 1), b_c = (-1, -1, 2); a_c.l_c = 5, b_c.l_c = 9, l_c.l_c = 14 -> shares 5/14 and 9/14."""
    a, b = np.array([1.0, 2, 3]), np.array([0.0, 0, 3])
    s = variance_shares({"a": a, "b": b}, a + b)
    assert s == {"a": pytest.approx(5 / 14), "b": pytest.approx(9 / 14)}
    with pytest.raises(ValueError, match="zero variance"):
        variance_shares({"a": a}, np.ones(3))
