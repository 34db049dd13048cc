"""Parts of the relation model (seed 001, § 3.2, App. A): backbone, queries, deformable read,
sampler, branches and the Eq. 6 score."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from relate.model.backbone import create_backbone
from relate.model.branches import TwoBranchHead
from relate.model.config import BackboneConfig, DeformableConfig, RelationModelConfig, SamplerConfig
from relate.model.deformable import DeformableRead, bilinear_read, ring_offsets
from relate.model.queries import FourierEncoding, region_prior
from relate.model.sampler import PairSampler, candidate_grid
from relate.model.score import Calibration, fit_platt, relation_score

TINY = BackboneConfig(name="vit_tiny_patch16_224", img_size=32, depth=2, taps=[-2, -1], patch_size=8)


def test_backbone_preprocessing_comes_from_timm_pretrained_cfg():
    import timm

    b = create_backbone(TINY)
    pc = timm.create_model("vit_tiny_patch16_224", pretrained=False).pretrained_cfg
    assert b.preprocessing.mean == tuple(pc["mean"]) and b.preprocessing.std == tuple(pc["std"])
    dino = timm.models.get_pretrained_cfg("vit_small_plus_patch16_dinov3").to_dict()
    assert tuple(dino["mean"]) != b.preprocessing.mean  # different families, different constants
    x = torch.rand(2, 3, 32, 40)
    assert b(x).shape == (2, 192, 4, 5)
    assert b.tap_logits.shape == (2,) and len(b.tap_norms) == 2


def test_backbone_errors_name_the_problem():
    with pytest.raises(ValueError, match="no_such_vit"):
        create_backbone(TINY.model_copy(update={"name": "no_such_vit"}))
    with pytest.raises(ValueError, match="tap 5"):
        create_backbone(TINY.model_copy(update={"taps": [5]}))


def test_region_prior_inside_beats_outside_and_masks_replace_boxes():
    boxes = torch.tensor([[[0.0, 0.0, 0.5, 0.5]]])
    p = region_prior(boxes, 4, 4).view(4, 4)
    assert p[0, 0] > 0.5 and p[3, 3] < 0.05 and p[1, 1] > p[2, 2]
    mask = torch.zeros(1, 1, 16, 16)
    mask[..., 12:, 12:] = 1
    pm = region_prior(boxes, 4, 4, mask).view(4, 4)
    assert pm[3, 3] == 1 and pm[0, 0] == 0
    zero_area = region_prior(torch.tensor([[[0.5, 0.5, 0.5, 0.5]]]), 4, 4)
    assert zero_area.max() > 0.2  # contact regions of touching boxes still pool something


def test_fourier_encoding_separates_nearby_boxes():
    enc = FourierEncoding(4, 8, 32)
    a = enc(torch.tensor([0.1, 0.1, 0.2, 0.2]))
    b = enc(torch.tensor([0.12, 0.1, 0.22, 0.2]))
    assert a.shape == (32,) and not torch.allclose(a, b)


def test_pair_corners_are_the_pairs_own_corner_encodings():
    """``PairTransformer.pair_corners`` (each box's corners encoded once, gathered to its pairs) against
    the encoding ``forward`` makes from the pairs' boxes themselves, subject's top-left and bottom-right
    then the object's; a padding pair (-1) reads box 0 as ``gather_pairs`` does. The transformer's output
    is the same either way, and so are the encoder's gradients."""
    from relate.model.pair_head import PairTransformer
    from relate.model.pooling import gather_pairs

    torch.manual_seed(0)
    tf = PairTransformer(16, 2, 1, 1, 4, 0.0)
    boxes = torch.rand(2, 5, 4)
    boxes = torch.cat([boxes[..., :2].minimum(boxes[..., 2:]), boxes[..., :2].maximum(boxes[..., 2:])], -1)
    pairs = torch.tensor([[[0, 1], [3, 2], [4, 4]], [[1, 0], [2, 4], [-1, -1]]])
    bs, bo = gather_pairs(boxes, pairs)
    pts = torch.stack([bs[..., :2], bs[..., 2:], bo[..., :2], bo[..., 2:]], dim=-2)
    want = tf.corner_enc(pts) + tf.corner_type
    got = tf.pair_corners(boxes, pairs)
    assert got.shape == (2, 3, 4, 16) and torch.allclose(got, want, atol=1e-6)
    x, scene = torch.randn(2, 3, 16), torch.randn(2, 4, 16)
    pad = pairs[..., 0] < 0
    grads = []
    for corners in (None, tf.pair_corners(boxes, pairs)):
        tf.zero_grad()
        out = tf(x, scene, bs, bo, pad, corners=corners)
        out.square().sum().backward()
        grads.append((out.detach(), tf.corner_enc.mlp[0].weight.grad.clone()))
    assert torch.allclose(grads[0][0], grads[1][0], atol=1e-5)
    assert torch.allclose(grads[0][1], grads[1][1], rtol=1e-4, atol=1e-6)


def test_deformable_read_starts_as_identity_and_gate_gets_gradient():
    cfg = DeformableConfig(heads=4, points=4, null_slots=2)
    read = DeformableRead(32, cfg)
    x = torch.randn(2, 5, 32, requires_grad=True)
    fmap = torch.randn(2, 32, 6, 6)
    anchors = torch.tensor([0.1, 0.1, 0.4, 0.4]).expand(2, 5, 4, 4).clone()
    y = read(x, fmap, anchors)
    assert torch.equal(y, x)  # zero-initialised gate: training starts from the model without the read
    y.pow(2).sum().backward()
    assert read.gate.grad is not None and read.gate.grad.abs() > 0


def test_bilinear_read_is_grid_sample_then_the_weighted_sum():
    """The deformable read's one-matrix form against torch's own grid_sample (bilinear, border padding,
    align_corners=False) followed by the attention-weighted sum: values and the gradients of the map,
    the points and the weights, with points on pixel centres, on the frame's outer edges (-1, 1),
    just inside and just past them, and far outside (border padding reads the edge)."""
    g = torch.Generator().manual_seed(0)
    n, c, h, w, p = 3, 5, 6, 7, 4
    centre_x, centre_y = (2 * 3 + 1) / w - 1, (2 * 2 + 1) / h - 1  # the centre of pixel (x=3, y=2)
    fixed = torch.tensor([[centre_x, centre_y], [-1.0, -1.0], [1.0, 1.0], [1.0 - 1e-4, -1.0 + 1e-4],
                          [1.0 + 1e-4, -1.0 - 1e-4], [-3.0, 0.2], [0.3, 4.0], [1 - 1 / w, 1 - 1 / h]])
    rand = torch.rand(n, p, 10, 2, generator=g) * 3 - 1.5
    grid = torch.cat([fixed.expand(n, p, -1, -1), rand], dim=2).requires_grad_(True)
    k = grid.shape[2]
    val = torch.randn(n, c, h, w, generator=g, requires_grad=True)
    weights = torch.rand(n, p, k, generator=g).requires_grad_(True)
    probe = torch.randn(n, p, c, generator=g)

    ref = (F.grid_sample(val, grid, mode="bilinear", padding_mode="border", align_corners=False)
           * weights[:, None]).sum(-1).permute(0, 2, 1)  # (N, C, P, K) -> (N, P, C)
    grads_ref = torch.autograd.grad((ref * probe).sum(), (val, grid, weights))
    got = bilinear_read(val, grid, weights)
    grads = torch.autograd.grad((got * probe).sum(), (val, grid, weights))
    assert torch.allclose(got, ref, atol=1e-5)
    # pixel (3, 2)'s centre reads that pixel alone
    one = bilinear_read(val, fixed[:1].expand(n, 1, 1, 2), torch.ones(n, 1, 1))
    assert torch.allclose(one[:, 0], val[:, :, 2, 3], atol=1e-6)
    for name, a, b in zip(("map", "points", "weights"), grads, grads_ref):
        assert torch.allclose(a, b, atol=1e-4), name


def test_deformable_read_under_bfloat16_autocast_matches_float32():
    """The released recipe trains under autocast (optim.amp on CUDA): the read's linear layers then give
    bfloat16 values and offsets while its softmax stays float32. The read must run (the scatter of
    float32 weights into a bfloat16 buffer fails) and keep its positions in float32, as grid_sample did,
    so it stays within bfloat16 round-off of the float32 read."""
    torch.manual_seed(0)
    read = DeformableRead(32, DeformableConfig(heads=4, points=4, null_slots=2))
    with torch.no_grad():
        read.gate.fill_(1.0)
    x, fmap = torch.randn(2, 5, 32), torch.randn(2, 32, 6, 6)
    anchors = torch.tensor([0.1, 0.1, 0.4, 0.4]).expand(2, 5, 4, 4).clone()
    ref = read(x, fmap, anchors)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = read(x, fmap, anchors)
    assert torch.allclose(got.float(), ref, atol=0.02 * float(ref.abs().max()))


def test_deformable_ring_init_distinct_and_offsets_unbounded():
    rings = ring_offsets(8, 4, 0.5, 1.5)
    pts = rings[:, 0].reshape(-1, 2)
    assert torch.unique(pts.round(decimals=4), dim=0).shape[0] == 32  # every point of an anchor distinct
    radii = rings[:, 0].norm(dim=-1)
    assert radii.min() == pytest.approx(0.5) and radii.max() == pytest.approx(1.5)
    read = DeformableRead(32, DeformableConfig(heads=2, points=2))
    with torch.no_grad():
        read.offsets.bias.fill_(5.0)  # 5 half-extents: far outside the box, nothing clamps it
    loc = read.sample_locations(torch.zeros(1, 1, 32), torch.tensor([0.4, 0.4, 0.6, 0.6]).expand(1, 1, 4, 4))
    assert loc.max().item() == pytest.approx(0.5 + 5 * 0.1)


def test_sampler_budgets_and_forced_pairs():
    n = 6
    valid = torch.tensor([[True] * 5 + [False]])
    grid = candidate_grid(valid)
    assert grid.sum() == 20 and not grid.view(n, n).diagonal().any()
    s = PairSampler(16, 16, geometry_keep=8, learned_keep=3)
    force = torch.zeros(1, n * n, dtype=torch.bool)
    forced = [0 * n + 4, 4 * n + 0, 2 * n + 3, 3 * n + 1]
    force[0, forced] = True
    out = s(torch.randn(1, n * n, 19), torch.randn(1, n, 16), valid, force)
    kept = set(out.flat[out.valid].tolist())
    assert set(forced) <= kept  # every annotated pair survives both stages in training
    assert out.pairs.shape[1] == 4  # the learned budget grows to hold the forced ones
    free = s(torch.randn(1, n * n, 19), torch.randn(1, n, 16), valid)
    assert free.valid.sum() == 3 and (free.pairs[free.valid][:, 0] != free.pairs[free.valid][:, 1]).all()
    assert (free.pairs[free.valid] < 5).all()  # padding boxes are never paired


def test_branches_eq2_and_vocabulary_is_only_a_matrix():
    head = TwoBranchHead(16, 8, 8, tau_init=10.0, beta_init=-1.0, dropout=0.0).eval()
    x, geo = torch.randn(3, 16), torch.randn(3, 16)
    bank = F.normalize(torch.randn(5, 8), dim=-1)
    sc = head(x, geo, bank)
    a = sc.alpha
    expect = 10.0 * (a * sc.cos_spa + (1 - a) * sc.cos_sem) - 1.0
    assert torch.allclose(sc.logits, expect, atol=1e-5)
    # swapping the vocabulary = swapping rows: a column's score does not depend on the others
    perm = torch.tensor([4, 2, 0])
    sub = head(x, geo, bank[perm])
    assert torch.allclose(sub.logits, sc.logits[:, perm], atol=1e-5)
    assert torch.allclose(head.gate(bank[perm]), a[perm])  # alpha_p depends on e_p alone


def test_score_eq6_and_platt():
    l_pred, l_pair = np.array([[1.0, -2.0]]), np.array([0.5])
    raw = relation_score(l_pred, l_pair, 2.0)
    assert raw[0, 0] == pytest.approx(1 / (1 + math.exp(-(1.0 + 2.0 * 0.5))))
    cal = Calibration(0.5, -1.0)
    s = relation_score(torch.tensor(l_pred), torch.tensor(l_pair), 2.0, cal)
    assert s[0, 1].item() == pytest.approx(1 / (1 + math.exp(-(0.5 * (-2.0 + 1.0) - 1.0))))
    assert not Calibration().fitted and Calibration.from_dict({"a": None, "b": None}).to_dict() == {"a": None, "b": None}
    rng = np.random.default_rng(0)
    z = rng.normal(size=3000)
    y = rng.uniform(size=3000) < 1 / (1 + np.exp(-(0.7 * z - 0.4)))
    fit = fit_platt(z, y)
    assert fit.a == pytest.approx(0.7, abs=0.12) and fit.b == pytest.approx(-0.4, abs=0.12)


def test_config_validation_errors():
    with pytest.raises(ValueError, match="learned_keep"):
        SamplerConfig(geometry_keep=10, learned_keep=20)
    with pytest.raises(ValueError, match="divisible"):
        RelationModelConfig(dim=30, heads=8)
    with pytest.raises(ValueError):
        RelationModelConfig(unknown_field=1)
