"""The relation model on CUDA: every tensor on the device, fp32 forward equal to the CPU forward,
the fused vocabulary product equal to a float64 matmul, padding that does not leak, bf16 autocast.

Tolerances (fp32, TF32 off): the CPU fp32 forward of this tiny model differs from a float64 forward
by up to 4.6e-4 in l_pred, 9e-5 in l_pair, z_spa, z_sem and grounding, and 6e-8 in the geometry
pre-scorer (measured on the test inputs); two correct fp32 implementations may each be that far from
the exact value, so the bounds are about twice those: 1e-3 for l_pred, 2.5e-4 for l_pair, z and
grounding, 1e-6 for the geometry logits. Reordered sums on one CPU (another batch or thread
count) move l_pred by about 1.5e-6, so a wrong kernel, a tensor left on the wrong device or a
leaking pad shows as a difference orders of magnitude above these bounds.
"""

from __future__ import annotations

import pytest
import torch

from _gpu_common import (REFERENCE, TEXT_DIM, aligned, batch, box_masks, close, kept_pairs, tensors_of, tiny_model,
                         unit_rows)

ATOL = {"l_pred": 1e-3, "l_pair": 2.5e-4, "z": 2.5e-4, "grounding": 2.5e-4, "geo": 1e-6, "rel": 2.5e-4}


def _bank(v: int = 50, seed: int = 3) -> torch.Tensor:
    return torch.from_numpy(unit_rows(v, TEXT_DIM, seed))


def _forward(model, dev, images, boxes, valid, bank, masks=None, force=None):
    """The inference path (no_grad, cached alpha and scoring matrix) on ``dev``."""
    to = lambda t: None if t is None else t.to(dev)  # noqa: E731
    with torch.no_grad():
        b = bank.to(dev)
        alpha = model.head.gate(b)
        return model(to(images), to(boxes), to(valid), b, alpha=alpha, scoring=model.head.scoring_matrix(b, alpha),
                     masks=to(masks), force=to(force))


@pytest.fixture(scope="module")
def models(dev):
    """The same seeded weights on the reference (CPU) and on the device under test, eval mode."""
    ref = tiny_model().eval()
    dut = tiny_model().eval().to(dev)
    for (k, a), (_, b) in zip(ref.state_dict().items(), dut.state_dict().items()):
        assert torch.equal(a, b.cpu()), f"{k}: the two copies differ before any forward"
    return ref, dut


def test_every_parameter_buffer_and_output_lives_on_the_device(models, dev):
    _, model = models
    for name, t in [*model.named_parameters(), *model.named_buffers()]:  # includes non-persistent buffers
        assert t.device.type == dev.type, f"{name} is on {t.device}"
        assert t.dtype == torch.float32 or not t.is_floating_point(), f"{name} is {t.dtype}"
    images, boxes, valid = batch()
    for masks in (None, box_masks(boxes, valid, images.shape[-1])):
        out = _forward(model, dev, images, boxes, valid, _bank(), masks=masks)
        found = tensors_of(out)
        assert {"sampled.pairs", "sampled.l_pair", "scores.logits", "scores.z_spa", "grounding"} <= set(found)
        for name, t in found.items():
            assert t.device.type == dev.type, f"output {name} is on {t.device} (masks={masks is not None})"
        # the lazily computed parts of the scores too
        for name in ("alpha", "mixed", "cos_spa", "cos_sem"):
            t = getattr(out.scores, name)
            assert t.device.type == dev.type and t.dtype == torch.float32, f"scores.{name}: {t.device} {t.dtype}"
        assert out.scores.logits.dtype == torch.float32 and out.sampled.pairs.dtype == torch.long
        assert torch.isfinite(out.scores.logits[out.sampled.valid]).all()
    sm = model.head.scoring_matrix(_bank().to(dev))
    assert sm.weight_t.device.type == dev.type and sm.weight_t.is_contiguous()
    if dev.type == "cuda":
        assert sm.packed is None, "the oneDNN-packed copy is for CPU weights only"


def _check_parity(ref_out, dut_out, valid, what: str) -> None:
    for b in range(valid.shape[0]):
        r, d = aligned(ref_out, dut_out, b)
        tag = f"{what}, image {b}"
        close(dut_out.scores.logits[b][d.to(dut_out.scores.logits.device)], ref_out.scores.logits[b][r],
              ATOL["l_pred"], what=f"{tag}: l_pred")
        for name, key in (("l_pair", "l_pair"), ("z_spa", "z"), ("z_sem", "z")):
            src_r = ref_out.sampled.l_pair if name == "l_pair" else getattr(ref_out.scores, name)
            src_d = dut_out.sampled.l_pair if name == "l_pair" else getattr(dut_out.scores, name)
            close(src_d[b][d.to(src_d.device)], src_r[b][r], ATOL[key], what=f"{tag}: {name}")
        v = valid[b]
        close(dut_out.grounding[b][v.to(dut_out.grounding.device)], ref_out.grounding[b][v], ATOL["grounding"],
              what=f"{tag}: grounding")


@pytest.mark.parametrize("use_masks", [False, True], ids=["boxes", "masks"])
def test_fp32_forward_equals_the_cpu_forward(models, dev, use_masks):
    """12 boxes (132 ordered pairs -> 40 -> 20 kept) and 5 boxes (20 pairs, all kept) in one padded batch."""
    ref, dut = models
    images, boxes, valid = batch()
    masks = box_masks(boxes, valid, images.shape[-1]) if use_masks else None
    bank = _bank()
    a = _forward(ref, REFERENCE, images, boxes, valid, bank, masks)
    b = _forward(dut, dev, images, boxes, valid, bank, masks)
    # stage 1 scores every candidate: compare all of them
    gv = a.sampled.geo_valid
    assert torch.equal(b.sampled.geo_valid.cpu(), gv)
    close(b.sampled.geo_logits.cpu()[gv], a.sampled.geo_logits[gv], ATOL["geo"], what="geometry pre-scorer logits")
    same = all(set(kept_pairs(a.sampled, i)) == set(kept_pairs(b.sampled, i)) for i in range(len(valid)))
    if not same:  # allowed only across a numerical tie at a top-k boundary
        _assert_only_ties_differ(a, b, valid)
        force = torch.zeros(valid.shape[0], valid.shape[1] ** 2, dtype=torch.bool)
        for i in range(len(valid)):
            for s, o in kept_pairs(a.sampled, i):
                force[i, s * valid.shape[1] + o] = True
        a = _forward(ref, REFERENCE, images, boxes, valid, bank, masks, force=force)
        b = _forward(dut, dev, images, boxes, valid, bank, masks, force=force)
    _check_parity(a, b, valid, "boxes" if masks is None else "masks")
    assert b.sampled.valid.sum().item() == 20 + 20


def _assert_only_ties_differ(a, b, valid) -> None:
    """Each stage's kept set may differ from the reference only where the reference's scores at the
    top-k boundary are closer than the parity tolerance."""
    for i in range(len(valid)):
        ka, kb = set(kept_pairs(a.sampled, i)), set(kept_pairs(b.sampled, i))
        if ka == kb:
            continue
        n = valid.shape[1]
        geo = a.sampled.geo_logits[i][a.sampled.geo_valid[i]].sort(descending=True).values
        rel = a.sampled.rel_logits[i][a.sampled.rel_valid[i]].sort(descending=True).values
        gaps = []
        for scores, keep in ((geo, 40), (rel, 20)):
            if scores.numel() > keep:
                gaps.append(float(scores[keep - 1] - scores[keep]))
        assert gaps and min(gaps) < ATOL["rel"], (
            f"image {i}: kept pairs differ though the reference's boundary gaps {gaps} exceed the tolerance: "
            f"only reference {sorted(ka - kb)}, only device {sorted(kb - ka)} (n={n})")


def test_fused_scoring_matrix_equals_a_float64_product(models, dev):
    """ScoringMatrix.logits on the device (a BLAS addmm; no oneDNN packing there) at the released
    vocabulary size, against float64 on the CPU and against the CPU's packed oneDNN product."""
    ref, dut = models
    bank = _bank(19103, seed=7)
    sm_dut = dut.head.scoring_matrix(bank.to(dev))
    sm_ref = ref.head.scoring_matrix(bank)
    close(sm_dut.weight_t, sm_ref.weight_t, 1e-6, what="scoring matrix columns [alpha e; (1 - alpha) e]")
    beta = torch.tensor(-1.5)
    g = torch.Generator().manual_seed(0)
    for rows in (1, 7, 128, 300):
        z = torch.randn(rows, 2 * TEXT_DIM, generator=g) * 10
        got = sm_dut.logits(z.to(dev), beta.to(dev))
        assert got.device.type == dev.type and got.dtype == torch.float32 and got.shape == (rows, 19103)
        expect = z.double() @ sm_ref.weight_t.double() - 1.5
        close(got, expect, 1e-4, what=f"{rows} rows vs float64")
        close(got, sm_ref.logits(z, beta), 1e-4, what=f"{rows} rows vs the CPU product")
    z = torch.randn(2, 4, 2 * TEXT_DIM, generator=g)  # leading dimensions kept
    assert sm_dut.logits(z.to(dev), beta.to(dev)).shape == (2, 4, 19103)


def test_fused_inference_path_equals_the_training_path_on_the_device(models, dev):
    """Without gradients the head folds Eq. 2's gate into one product; with them it computes the two
    branch cosines. On the device both must give the same logits (and the lazy cosines the same)."""
    _, model = models
    images, boxes, valid = (t.to(dev) for t in batch((5, 4)))
    bank = _bank(37).to(dev)
    with torch.enable_grad():
        slow = model(images, boxes, valid, bank).scores
    with torch.no_grad():
        fast = model(images, boxes, valid, bank, scoring=model.head.scoring_matrix(bank)).scores
    close(fast.logits, slow.logits, 1e-5, 1e-5, what="fused vs two-branch logits")
    close(fast.mixed, slow.mixed, 1e-6, 1e-5, what="mixed cosine")
    close(fast.cos_spa, slow.cos_spa, 1e-6, 1e-5, what="spatial cosine")


def test_padding_does_not_leak_into_real_pairs(models, dev):
    """An image scored alone equals the same image in a batch padded to 12 boxes (on the device,
    where top-k over the -inf padding picks its own indices). Reordered sums move l_pred by about
    1.5e-6 on the CPU; a leak moves it by O(0.1); the bound is 1e-4."""
    _, model = models
    images, boxes, valid = batch((12, 5, 3))
    bank = _bank()
    full = _forward(model, dev, images, boxes, valid, bank)
    for i, n in ((1, 5), (2, 3)):
        alone = _forward(model, dev, images[i:i + 1], boxes[i:i + 1, :n], valid[i:i + 1, :n], bank)
        ka, kf = kept_pairs(alone.sampled, 0), kept_pairs(full.sampled, i)
        assert set(ka) == set(kf) and len(ka) == n * (n - 1)
        keys = sorted(ka)
        ia = torch.tensor([ka[k] for k in keys], device=dev)
        ib = torch.tensor([kf[k] for k in keys], device=dev)
        close(full.scores.logits[i][ib], alone.scores.logits[0][ia], 1e-4, what=f"image {i}: l_pred padded vs alone")
        close(full.sampled.l_pair[i][ib], alone.sampled.l_pair[0][ia], 1e-4, what=f"image {i}: l_pair")
        close(full.grounding[i, :n], alone.grounding[0], 1e-4, what=f"image {i}: grounding")


def test_bf16_autocast_inference_is_finite_and_near_fp32(models, dev):
    """The GPU smoke test and latency benchmark run the model under bf16 autocast: it must run on the
    device, stay finite and stay near the fp32 logits (bf16 keeps 8 mantissa bits: 2^-8 of
    |l_pred| <= 14 is 0.05 per rounding; the bound allows a few roundings)."""
    _, model = models
    images, boxes, valid = batch((5, 4))  # every pair kept, so bf16 rounding cannot change the selection
    bank = _bank().to(dev)
    fp32 = _forward(model, dev, images, boxes, valid, bank)
    with torch.autocast(dev.type, dtype=torch.bfloat16):
        half = _forward(model, dev, images, boxes, valid, bank)
        with torch.no_grad():  # the smoke test's form: alpha only, no cached scoring matrix
            half_alpha = model(images.to(dev), boxes.to(dev), valid.to(dev), bank, alpha=model.head.gate(bank))
    for out, what in ((half, "scoring"), (half_alpha, "alpha")):
        ok = out.sampled.valid
        assert out.scores.logits.device.type == dev.type
        assert torch.isfinite(out.scores.logits[ok].float()).all()
        assert torch.isfinite(out.sampled.l_pair[ok].float()).all()
        for b in range(valid.shape[0]):
            r, d = aligned(fp32, out, b)
            r, d = r.to(dev), d.to(dev)
            tag = f"bf16 ({what}), image {b}"
            close(out.scores.logits[b][d].float(), fp32.scores.logits[b][r], 0.25, what=f"{tag}: l_pred")
            close(out.sampled.l_pair[b][d].float(), fp32.sampled.l_pair[b][r], 0.1, what=f"{tag}: l_pair")
