"""Training on CUDA: the objective of relate.losses and its gradients equal the CPU's in fp32, and a
bf16-autocast step (train_jobs.train_relation's default on a GPU) is finite and near fp32.

Gradient parity is per parameter tensor: |g_cuda - g_cpu| <= 2e-3 |g_cpu| + 1e-4 max|g| (norms over the
tensor; max|g| the largest parameter gradient norm). The CPU fp32 gradients of this step differ
from float64 ones by at most 0.29 of that bound (largest: the box Fourier encoders, 6.5e-4
relative), so two correct fp32 devices stay below 0.6 of it. The loss terms differ from float64 by
at most 3e-5 (InfoNCE); their bound is 1e-4 + 1e-4 |loss|.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from _gpu_common import REFERENCE, TEXT_DIM, batch, close, tiny_model, unit_rows

REL_GRAD_TOL, ABS_GRAD_TOL = 2e-3, 1e-4  # x |g_cpu| and x the largest gradient norm


def _objective_inputs(n_boxes: int):
    """Relations (s, o, predicate) over a 4-string vocabulary with synonyms and an inverse pair."""
    from relate.losses import PredicateSpace

    va = 4
    bank = torch.from_numpy(unit_rows(va, TEXT_DIM, seed=5))
    rels = torch.tensor([[[0, 1, 0], [2, 0, 2], [3, 4, 1], [-1, -1, -1]],
                         [[1, 0, 3], [2, 1, 0], [-1, -1, -1], [-1, -1, -1]]])
    cats = torch.tensor([[0, 1, 0, 1, 0] + [-1] * (n_boxes - 5), [1, 0, 1] + [-1] * (n_boxes - 3)])
    inverse = torch.zeros(va, va, dtype=torch.bool)
    inverse[0, 2] = inverse[2, 0] = inverse[1, 2] = inverse[2, 1] = True
    g = torch.Generator().manual_seed(4)
    space = PredicateSpace(torch.tensor([0, 0, 1, 2]), inverse, torch.tensor([1.0, 1.0, 1.0, 0.0]),
                           torch.rand(va, va, generator=g) * 0.3, torch.eye(va) + 0.5 * (1 - torch.eye(va)),
                           torch.arange(va), F.normalize(torch.randn(2, TEXT_DIM, generator=g), dim=-1),
                           torch.full((2, 2), 0.5))
    return bank, rels, cats, space


def _step(model, dev, amp: bool = False):
    """One forward + objective + backward as train_relation does it; returns the terms (detached)."""
    from relate.losses import LossConfig, force_mask, relation_objective

    images, boxes, valid = (t.to(dev) for t in batch((5, 3)))
    bank, rels, cats, space = _objective_inputs(valid.shape[1])
    bank, rels, cats, space = bank.to(dev), rels.to(dev), cats.to(dev), space.to(dev)
    model.zero_grad(set_to_none=True)
    with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=amp):
        out = model(images, boxes, valid, bank, force=force_mask(rels, valid.shape[1]))
        terms = relation_objective(out, rels, cats, valid, space, LossConfig())
    terms["total"].backward()
    return {k: v.detach() for k, v in terms.items()}


def test_objective_and_gradients_equal_the_cpu(dev):
    ref, dut = tiny_model().train(), tiny_model().train().to(dev)
    t_ref, t_dut = _step(ref, REFERENCE), _step(dut, dev)
    assert set(t_ref) == set(t_dut) == {"infonce", "sigmoid", "swap", "background", "grounding", "geometry",
                                        "relatedness", "total"}
    for k in t_ref:
        assert t_dut[k].device.type == dev.type and torch.isfinite(t_dut[k]), k
        close(t_dut[k], t_ref[k], 1e-4, 1e-4, what=f"loss term {k}")
    grads_ref = {n: p.grad for n, p in ref.named_parameters()}
    grads_dut = {n: p.grad for n, p in dut.named_parameters()}
    assert {n for n, g in grads_ref.items() if g is None} == {n for n, g in grads_dut.items() if g is None}
    scale = max(float(g.norm()) for g in grads_ref.values() if g is not None)
    assert scale > 0
    for n, g_ref in grads_ref.items():
        if g_ref is None:
            continue
        g = grads_dut[n]
        assert g.device.type == dev.type and g.dtype == torch.float32 and torch.isfinite(g).all(), n
        diff, norm = float((g.cpu() - g_ref).norm()), float(g_ref.norm())
        bound = REL_GRAD_TOL * norm + ABS_GRAD_TOL * scale
        assert diff <= bound, f"{n}: |grad diff| {diff:.3g} > {bound:.3g} (|grad| {norm:.3g}, largest {scale:.3g})"


def test_bf16_autocast_training_step_is_finite_and_near_fp32(dev):
    """train_relation's step on a GPU: bf16 autocast forward and objective, fp32 gradients, clipping
    and an AdamW step. Parameters stay fp32 on the device, every gradient is finite, the loss is
    within 5% (+0.05) of the fp32 loss and the step changes the weights."""
    model = tiny_model().train().to(dev)
    fp32 = _step(model, dev)
    terms = _step(model, dev, amp=True)
    for k, v in terms.items():
        assert torch.isfinite(v.float()), k
    close(terms["total"].float(), fp32["total"], 0.05, 0.05, what="bf16 total loss vs fp32")
    params = [p for p in model.parameters() if p.grad is not None]
    assert params and all(p.dtype == torch.float32 and p.grad.dtype == torch.float32 for p in params)
    assert all(torch.isfinite(p.grad).all() for p in params)
    gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    assert torch.isfinite(gnorm) and gnorm.device.type == dev.type
    before = [p.detach().clone() for p in params]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    opt.step()
    moved = sum(not torch.equal(a, p.detach()) for a, p in zip(before, params))
    assert moved > len(params) // 2 and all(torch.isfinite(p).all() for p in params)
    with torch.no_grad(), torch.autocast(dev.type, dtype=torch.bfloat16):
        images, boxes, valid = (t.to(dev) for t in batch((5, 3)))
        out = model.eval()(images, boxes, valid, torch.from_numpy(unit_rows(4, TEXT_DIM, seed=5)).to(dev))
    assert torch.isfinite(out.scores.logits[out.sampled.valid].float()).all()


def test_checkpoint_written_from_the_device_loads_on_the_cpu(dev, tmp_path):
    """A model trained on the device (bf16 step) is saved from its device tensors (save_checkpoint
    copies them to the CPU) and loads on the CPU with bit-identical weights and the same pairs."""
    from relate.checkpoint import load_checkpoint, save_checkpoint
    from relate.text.bank import TextBank

    model = tiny_model().train().to(dev)
    _step(model, dev, amp=True)
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    model.eval()
    bank = TextBank(("a", "b", "c", "d"), unit_rows(4, TEXT_DIM, seed=5), "minilm")
    ck = load_checkpoint(save_checkpoint(tmp_path / "ck", model, bank))
    for (k, a), (_, b) in zip(model.state_dict().items(), ck.model.state_dict().items()):
        assert b.device.type == "cpu" and torch.equal(a.cpu(), b), k
    images, boxes, valid = batch((5, 3))
    with torch.no_grad():
        a = model(images.to(dev), boxes.to(dev), valid.to(dev), bank.tensor(dev))
        b = ck.model(images, boxes, valid, bank.tensor())
    for i in range(valid.shape[0]):
        pairs_a = a.sampled.pairs[i].cpu()[a.sampled.valid[i].cpu()]
        pairs_b = b.sampled.pairs[i][b.sampled.valid[i]]
        assert sorted(map(tuple, pairs_a.tolist())) == sorted(map(tuple, pairs_b.tolist()))
        assert torch.isfinite(a.scores.logits[i][a.sampled.valid[i]]).all()
