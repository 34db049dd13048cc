"""The region pixel cue: each region's cells are the means of the input pixels they cover."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from relate.model.config import BackboneConfig, RelationModelConfig
from relate.model.model import create_relation_model
from relate.geometry import contact_box
from relate.model.region_pixels import (HISTOGRAM_SAMPLES, OWN_FLOOR, RegionPixelCue, colour_bins, colour_corners,
                                        colour_histogram, corners_dot, corners_mean, own_colours,
                                        pair_colour_features, region_cells)


def test_cells_are_the_mean_of_the_pixels_each_covers():
    """Reference: numpy means over the pixel blocks of an integer box split into 2 x 2 cells (each
    cell a whole number of pixels, so roi_align's bilinear samples are exact block means)."""
    rng = np.random.default_rng(0)
    img = rng.random((3, 20, 24)).astype(np.float32)
    x1, y1, x2, y2 = 4, 2, 16, 14  # 12 x 12 pixels, cells of 6 x 6
    got = region_cells(torch.from_numpy(img)[None], torch.tensor([[[x1, y1, x2, y2]]], dtype=torch.float32), 2)
    want = np.stack([img[:, y1 + 6 * r:y1 + 6 * (r + 1), x1 + 6 * c:x1 + 6 * (c + 1)].mean(axis=(1, 2))
                     for r in range(2) for c in range(2)], axis=1).reshape(-1)  # (C, cells*cells) flattened
    assert got.shape == (1, 1, 12)
    np.testing.assert_allclose(got[0, 0].numpy(), want, rtol=1e-5, atol=1e-6)


def test_pair_features_say_which_region_is_brighter_and_when_colours_match():
    img = torch.zeros(1, 3, 16, 32)
    img[:, :, :, :8] = 0.9   # region 0: bright grey
    img[:, :, :, 8:16] = 0.1  # region 1: dark grey
    img[:, :, :, 16:24] = 0.9  # region 2: the same colour as region 0
    boxes = torch.tensor([[[0, 0, 8, 16], [8, 0, 16, 16], [16, 0, 24, 16]]], dtype=torch.float32)
    r = region_cells(img, boxes, 1)
    feats = pair_colour_features(r[:, [0, 0]], r[:, [1, 2]])[0]  # pairs (0, 1) and (0, 2)
    diff, mag = feats[:, 6:9], feats[:, 9:12]
    assert torch.allclose(diff[0], torch.full((3,), 0.8), atol=1e-5)  # 0 brighter than 1
    assert torch.allclose(mag[1], torch.zeros(3), atol=1e-6)          # 0 same colour as 2
    flipped = pair_colour_features(r[:, [1]], r[:, [0]])[0, 0]
    assert torch.allclose(flipped[6:9], -diff[0]) and torch.allclose(flipped[9:12], mag[0])


def test_histogram_levels_are_hand_worked():
    """bins=4: level centres 0.125, 0.375, 0.625, 0.875. A flat region of (0.125, 0.375, 0.875) is all in
    bin (0, 1, 3) = 0*16 + 1*4 + 3 = 7; a red channel of 0.25 splits it half and half with bin (1, 1, 3) = 23;
    values past the outer centres (0.0, 1.0) belong wholly to the outer levels."""
    img = torch.zeros(1, 3, 8, 24)
    img[0, :, :, :8] = torch.tensor([0.125, 0.375, 0.875])[:, None, None]
    img[0, :, :, 8:16] = torch.tensor([0.25, 0.375, 0.875])[:, None, None]
    img[0, :, :, 16:] = torch.tensor([0.0, 1.0, 0.0])[:, None, None]
    boxes = torch.tensor([[[0, 0, 8, 8], [8, 0, 16, 8], [16, 0, 24, 8]]], dtype=torch.float32)
    h = colour_histogram(img, boxes, 4)[0]
    assert h.shape == (3, 64) and torch.allclose(h.sum(-1), torch.ones(3))
    assert torch.isclose(h[0, 7], torch.tensor(1.0))
    assert torch.isclose(h[1, 7], torch.tensor(0.5)) and torch.isclose(h[1, 23], torch.tensor(0.5))
    assert torch.isclose(h[2, 0 * 16 + 3 * 4 + 0], torch.tensor(1.0))


def test_two_shapes_of_one_colour_share_their_histogram_not_their_cells():
    """A disc and a bar on the same grey background: their mean cells differ whatever the colours
    (the background shows in the disc's corners); their histograms overlap when the colours are the
    same and hardly at all when they are not."""
    yy, xx = torch.meshgrid(torch.arange(16.0), torch.arange(16.0), indexing="ij")
    disc = ((yy - 7.5) ** 2 + (xx - 7.5) ** 2) <= 7.5 ** 2
    red, blue = torch.tensor([0.9, 0.1, 0.1]), torch.tensor([0.1, 0.1, 0.9])
    boxes = torch.tensor([[[0, 0, 16, 16], [16, 4, 32, 12]]], dtype=torch.float32)
    overlap = {}
    for name, bar in (("same", red), ("other", blue)):
        img = torch.full((1, 3, 16, 32), 0.5)
        img[0, :, :, :16][:, disc] = red[:, None]
        img[0, :, 4:12, 16:] = bar[:, None, None]
        h = colour_histogram(img, boxes, 4)[0]
        cells = region_cells(img, boxes, 2)[0]
        assert (cells[0] - cells[1]).abs().max() > 0.05
        overlap[name] = float(torch.minimum(h[0], h[1]).sum())
    assert overlap["same"] > 0.5 and overlap["other"] < 0.05, overlap


def test_cue_reads_the_pairs_it_is_given_and_the_model_adds_it():
    cue = RegionPixelCue(8, cells=2, bins=2)
    img = torch.rand(1, 3, 16, 16)
    boxes = torch.tensor([[[0, 0, 8, 8], [8, 8, 16, 16]]], dtype=torch.float32)
    out = cue(img, boxes, torch.tensor([[[0, 1], [1, 0]]]))
    r, h = region_cells(img, boxes, 2)[0], colour_histogram(img, boxes, 2)[0]
    contact = contact_box(boxes[:, [1]], boxes[:, [0]])
    r_c, h_c = region_cells(img, contact, 2)[0, 0], colour_histogram(img, contact, 2)[0, 0]
    want = torch.cat([pair_colour_features(r[1], r[0]), r_c, pair_colour_features(h[1], h[0]), torch.minimum(h[1], h[0]),
                      h_c, torch.minimum(h_c, h[1]), torch.minimum(h_c, h[0])])
    assert out.shape == (1, 2, 8)
    assert torch.allclose(out[0, 1], cue.embed(want), atol=1e-6)
    with pytest.raises(ValueError, match="at least 1 cell"):
        RegionPixelCue(8, cells=0)
    with pytest.raises(ValueError, match="histogram levels"):
        RegionPixelCue(8, cells=2, bins=-1)

    tiny = dict(backbone=BackboneConfig(name="vit_tiny_patch16_224", img_size=32, depth=1, patch_size=8, taps=[-1]),
                dim=32, heads=4, text_dim=16, pair_layers=0, joint_layers=0, scene_grid=2)
    torch.manual_seed(0)
    with_cue = create_relation_model(RelationModelConfig(**tiny, region_pixels=2, region_colour_bins=2)).eval()
    without = create_relation_model(RelationModelConfig(**tiny)).eval()
    assert with_cue.region_pixels is not None and without.region_pixels is None
    images = torch.rand(1, 3, 32, 32)
    boxes32 = torch.tensor([[[0, 0, 16, 16], [16, 16, 32, 32]]], dtype=torch.float32)
    bank = torch.nn.functional.normalize(torch.randn(3, 16), dim=-1)
    images2 = images.clone()
    images2[:, :, :16, :16] = 1.0 - images2[:, :, :16, :16]  # recolour region 0 only
    with torch.no_grad():
        for p in with_cue.backbone.parameters():  # the backbone reads nothing: only the cue sees the change
            p.zero_()
        a = with_cue(images, boxes32, torch.ones(1, 2, dtype=torch.bool), bank).l_pred
        b = with_cue(images2, boxes32, torch.ones(1, 2, dtype=torch.bool), bank).l_pred
    assert not torch.allclose(a, b)


def test_overlap_histogram_shows_the_front_region():
    """Two squares overlap by a strip; whichever is drawn last fills it. The contact region's
    histogram overlaps the front square's more than the back one's, and the order flips with it."""
    red, blue = torch.tensor([0.9, 0.1, 0.1]), torch.tensor([0.1, 0.1, 0.9])
    a, b = torch.tensor([[0.0, 4, 16, 20]]), torch.tensor([[10.0, 4, 26, 20]])
    contact = contact_box(a, b)[None]
    for front in ("a", "b"):
        img = torch.full((1, 3, 24, 28), 0.5)
        order = [(b, blue), (a, red)] if front == "a" else [(a, red), (b, blue)]
        for box, colour in order:
            x1, y1, x2, y2 = (int(v) for v in box[0])
            img[0, :, y1:y2, x1:x2] = colour[:, None, None]
        h = colour_histogram(img, torch.cat([a, b])[None], 4)[0]
        h_c = colour_histogram(img, contact, 4)[0, 0]
        with_a, with_b = float(torch.minimum(h_c, h[0]).sum()), float(torch.minimum(h_c, h[1]).sum())
        assert (with_a > with_b + 0.3) if front == "a" else (with_b > with_a + 0.3), (front, with_a, with_b)


def test_own_colours_remove_the_overlap_from_a_box_histogram():
    """Hand-worked: a 10 x 10 box half red, half blue (bins 0 and 1), whose 5 x 10 overlap with the
    other box is all blue: what only this box covers is all red (peak scaled to 1)."""
    h_box, h_x = torch.tensor([[0.5, 0.5, 0.0]]), torch.tensor([[0.0, 1.0, 0.0]])
    own = own_colours(h_box, torch.tensor([100.0]), h_x, torch.tensor([50.0]))
    assert torch.allclose(own, torch.tensor([[1.0, 0.0, 0.0]]))
    # no overlap: the box's own histogram, scaled to its peak
    assert torch.allclose(own_colours(h_box, torch.tensor([100.0]), h_x, torch.tensor([0.0])),
                          torch.tensor([[1.0, 1.0, 0.0]]))


def test_ownership_maps_show_whose_colour_fills_the_overlap():
    """Two overlapping bars on grey, red [0, 20) and blue [12, 32): drawn red over blue, every point of
    the overlap [12, 20) shows the subject's own colour and none the object's; drawn blue over red, the
    reverse. The subject box's own map shows red where the subject is visible: all of it when in front,
    12 of 20 columns when behind (the sample columns over x < 12)."""
    red, blue = torch.tensor([0.9, 0.1, 0.1]), torch.tensor([0.1, 0.1, 0.9])
    boxes = torch.tensor([[[0, 0, 20, 16], [12, 0, 32, 16]]], dtype=torch.float32)
    pairs = torch.tensor([[[0, 1]]])
    s = HISTOGRAM_SAMPLES ** 2
    for front in ("subject", "object"):
        img = torch.full((1, 3, 16, 32), 0.5)
        order = ((0, 20, red), (12, 32, blue)) if front == "object" else ((12, 32, blue), (0, 20, red))
        for x1, x2, colour in order:  # back to front
            img[0, :, :, x1:x2] = colour[:, None, None]
        cue = RegionPixelCue(8, cells=1, bins=4, ownership=True)
        cue.embed = torch.nn.Identity()  # read the features themselves
        out = cue(img, boxes, pairs)[0, 0]
        maps = out[-6 * s:].view(3, s, 2)  # contact, subject box, object box x (subject key, object key)
        feats = {"contact_s": maps[0, :, 0], "contact_o": maps[0, :, 1], "subject_s": maps[1, :, 0]}
        if front == "subject":
            assert torch.allclose(feats["contact_s"], torch.ones(s))
            assert torch.allclose(feats["contact_o"], torch.zeros(s))
            assert torch.allclose(feats["subject_s"], torch.ones(s))
        else:
            assert torch.allclose(feats["contact_s"], torch.zeros(s))
            assert torch.allclose(feats["contact_o"], torch.ones(s))
            cols = feats["subject_s"].view(HISTOGRAM_SAMPLES, HISTOGRAM_SAMPLES)
            x = (torch.arange(HISTOGRAM_SAMPLES) + 0.5) * 20 / HISTOGRAM_SAMPLES  # sample column centres
            assert torch.allclose(cols, (x < 12).float().expand(HISTOGRAM_SAMPLES, -1))
    with pytest.raises(ValueError, match="need colour bins"):
        RegionPixelCue(8, cells=2, bins=0, ownership=True)


@pytest.mark.parametrize("boxes_n", [5, 70])  # N <= K = 64: one product per image; N > K: samples gathered
def test_box_maps_are_each_pairs_own_box_samples_against_its_keys(boxes_n):
    """Every (subject, object) map is the pair's own box samples times that pair's keys, worked pair by
    pair; a padding pair (-1) reads box 0, as ``gather_pairs`` does."""
    from relate.model.region_pixels import _box_maps

    g = torch.Generator().manual_seed(0)
    b, p, s, k = 2, 7, 6, 64
    per_box = torch.rand(b, boxes_n, s, k, generator=g)
    keys = torch.rand(b, p, k, 2, generator=g)
    pairs = torch.randint(0, boxes_n, (b, p, 2), generator=g)
    pairs[1, -1] = -1
    got = _box_maps(per_box, keys, pairs)
    for side in (0, 1):
        for i in range(b):
            for j in range(p):
                row = per_box[i, max(int(pairs[i, j, side]), 0)]
                assert torch.allclose(got[side][i, j], (row @ keys[i, j]).flatten(), atol=1e-5)


@pytest.mark.parametrize("bins", [1, 2, 4, 5])
def test_contact_corners_are_the_dense_joint_weights(bins):
    """``colour_corners`` (eight bins a sample, samples last) against ``colour_bins`` (all bins ** 3, the definition):
    channel values on every level centre, halfway between two, exactly 0 and 1, just inside and just past
    the outer centres, and random ones; a zero-area box. The dense weights have at most eight non-zero
    bins a sample (what the sparse form relies on), and the histogram and the dot with keys agree."""
    g = torch.Generator().manual_seed(bins)
    centres = (torch.arange(bins) + 0.5) / bins
    edge = 0.5 / bins
    values = torch.cat([centres, centres + edge, torch.tensor([0.0, 1.0, edge - 1e-4, edge + 1e-4, 1 - edge + 1e-4,
                                                                1 - edge - 1e-4, 1.0000001, -0.2])])
    img = torch.rand(2, 3, 24, 40, generator=g)
    img[0, :, :8, : len(values)] = values[torch.randperm(len(values), generator=g)][None, None]
    img[0, 1, :8, : len(values)] = values.flip(0)[None]
    boxes = torch.tensor([[[0.0, 0, 20, 8], [3, 1, 30, 20], [5, 5, 5, 12], [0, 0, 40, 24]]]).repeat(2, 1, 1)
    dense = colour_bins(img, boxes, bins)
    assert int((dense > 1e-5).sum(-1).max()) <= 8  # round-off aside (a centre's neighbour: 1 - 5 * 0.2 > 0)
    idx, wt = colour_corners(img, boxes, bins)
    assert idx.shape == wt.shape == (*dense.shape[:2], 8, dense.shape[2])
    as_dense = torch.zeros_like(dense).scatter_add_(-1, idx.transpose(-1, -2), wt.transpose(-1, -2))
    assert torch.allclose(as_dense, dense, atol=1e-6)
    assert torch.allclose(corners_mean(idx, wt, bins), colour_histogram(img, boxes, bins), atol=1e-6)
    keys = torch.rand(2, 4, bins ** 3, 3, generator=g)
    assert torch.allclose(corners_dot(idx, wt, keys), torch.einsum("bnsk,bnkt->bnst", dense, keys), atol=1e-5)


def test_a_box_the_overlap_covers_whole_has_no_colours_of_its_own():
    """The box's histogram and the overlap's, equal but summed in different orders, differ by float32
    round-off: what is left is noise and must read as no colours, not as a map scaled to a peak of 1.
    A real remainder (5% of the box in a colour the overlap lacks) is kept; the floor sits at OWN_FLOOR
    of the box's area: a remainder just over it is kept, just under it dropped."""
    g = torch.Generator().manual_seed(0)
    h = torch.rand(3, 64, generator=g)
    h = h / h.sum(-1, keepdim=True)
    area = torch.tensor([100.0, 400.0, 37.0])
    residue = h * (1 + 3e-7 * torch.randn(3, 64, generator=g))  # the same histogram, other round-off
    assert torch.equal(own_colours(h, area, residue, area), torch.zeros(3, 64))
    sliver = torch.zeros(3, 64)
    sliver[:, 5] = 1.0
    h_box = 0.95 * h + 0.05 * sliver  # 5% of the box is colour 5, which the overlap (95% of it) lacks
    got = own_colours(h_box, area, h, 0.95 * area)
    assert torch.allclose(got.amax(-1), torch.ones(3)) and torch.equal(got.argmax(-1), torch.full((3,), 5))
    for share, kept in ((1.5 * OWN_FLOOR, True), (0.5 * OWN_FLOOR, False)):
        got = own_colours(h + share * sliver, area, h, area)  # left over: share of the area, in colour 5
        assert bool(got[:, 5].eq(1.0).all()) is kept and bool(got.eq(0).all()) is not kept
