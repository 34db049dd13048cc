"""The explicit occlusion cue: exact cell coverage and the overlap-agreement features."""

from __future__ import annotations

import pytest
import torch

from relate.model.occlusion import OcclusionCue, _box_sums, cell_coverage, occlusion_agreement


def test_cell_coverage_is_exact_fractional_area():
    box = torch.tensor([0.1, 0.25, 0.6, 0.5])
    cov = cell_coverage(box, (4, 5)).view(4, 5)
    # total coverage in cells equals the box area in cell units
    assert torch.isclose(cov.sum(), torch.tensor(0.5 * 0.25 * 20))
    assert torch.isclose(cov[1, 1], torch.tensor(1.0)) and torch.isclose(cov[1, 0], torch.tensor(0.5))
    assert cov[0].sum() == 0 and cov[3].sum() == 0
    assert cell_coverage(torch.tensor([0.3, 0.3, 0.3, 0.6]), (4, 4)).sum() == 0  # zero-width box


def _scene(front: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A 4x4 token map: box A covers columns 0-2, box B columns 1-3; the shared columns 1-2 carry
    the front box's feature, the rest each box's own (orthogonal) feature."""
    a, b = torch.tensor([1.0, 0, 0]), torch.tensor([0, 1.0, 0])
    tokens = torch.zeros(4, 4, 3)
    tokens[:, 0], tokens[:, 3] = a, b
    tokens[:, 1:3] = a if front == "a" else b
    box_a, box_b = torch.tensor([0.0, 0.0, 0.75, 1.0]), torch.tensor([0.25, 0.0, 1.0, 1.0])
    return tokens.view(1, 16, 3), box_a.view(1, 1, 4), box_b.view(1, 1, 4)


def test_agreement_says_which_box_the_overlap_belongs_to_and_flips_with_order():
    for front, sign in (("a", 1.0), ("b", -1.0)):
        tokens, box_a, box_b = _scene(front)
        f_ab = occlusion_agreement(tokens, (4, 4), box_a, box_b)[0, 0]
        f_ba = occlusion_agreement(tokens, (4, 4), box_b, box_a)[0, 0]
        assert f_ab[6] == 1 and torch.sign(f_ab[2]) == sign and torch.isclose(f_ab[2].abs(), torch.tensor(1.0))
        assert torch.sign(f_ab[5]) == sign  # the distance says the same: overlap equals the front box
        assert torch.allclose(f_ba[:2], f_ab[:2].flip(0)) and torch.isclose(f_ba[2], -f_ab[2])
        assert torch.allclose(f_ba[3:5], f_ab[3:5].flip(0)) and torch.isclose(f_ba[5], -f_ab[5])


def test_no_overlap_or_containment_gives_invalid_zero_features():
    tokens = torch.randn(1, 16, 3)
    left, right = torch.tensor([[[0.0, 0.0, 0.4, 1.0]]]), torch.tensor([[[0.6, 0.0, 1.0, 1.0]]])
    outer, inner = torch.tensor([[[0.0, 0.0, 1.0, 1.0]]]), torch.tensor([[[0.25, 0.25, 0.75, 0.75]]])
    assert occlusion_agreement(tokens, (4, 4), left, right).abs().sum() == 0
    assert occlusion_agreement(tokens, (4, 4), inner, outer).abs().sum() == 0  # nothing of inner is exclusive
    cue = OcclusionCue(8)
    out = cue(tokens, (4, 4), torch.zeros(1, 3, 8, 8), torch.cat([left, outer], 1), torch.cat([right, inner], 1))
    assert out.shape == (1, 2, 8) and torch.isfinite(out).all()


def test_pixel_source_reads_the_image_not_the_tokens():
    """Two squares drawn in colour; the later one covers the shared strip. The pixel cue must name
    the front square from the image alone (the tokens given are noise), and say the opposite when
    the drawing order flips."""
    box_a, box_b = torch.tensor([[[0.0, 0.25, 0.75, 0.75]]]), torch.tensor([[[0.25, 0.25, 1.0, 0.75]]])
    for front, sign in (("a", 1.0), ("b", -1.0)):
        img = torch.zeros(1, 3, 32, 32)
        a_px, b_px = (slice(8, 24), slice(0, 24)), (slice(8, 24), slice(8, 32))  # A red, B blue
        order = (("a", a_px, 0), ("b", b_px, 2)) if front == "b" else (("b", b_px, 2), ("a", a_px, 0))
        for _, (ys, xs), ch in order:    # back first, front last
            img[:, :, ys, xs] = 0.0
            img[:, ch, ys, xs] = 2.0
        feats = occlusion_agreement(torch.nn.functional.adaptive_avg_pool2d(img, 16).flatten(2).transpose(1, 2),
                                    (16, 16), box_a, box_b)[0, 0]
        assert torch.sign(feats[2]) == sign and torch.sign(feats[5]) == sign
        cue = OcclusionCue(8, "pixels", grid=16)
        noise = torch.randn(1, 4, 8)
        ref = cue.embed(feats[None, None])
        assert torch.allclose(cue(noise, (2, 2), img, box_a, box_b), ref, atol=1e-6)
    with pytest.raises(ValueError, match="'tokens' or 'pixels'"):
        OcclusionCue(8, "depth")


def test_box_sums_are_the_exact_sums_of_the_cells_a_box_covers():
    """The factored pooling (columns, then rows) against plain slicing: a box on cell edges sums
    exactly its cells; a box reaching halfway into a cell takes half of that cell."""
    torch.manual_seed(0)
    h, w, d = 6, 8, 5
    tokens = torch.randn(2, h * w, d)
    grid_map = tokens.view(2, h, w, d)
    boxes = torch.tensor([[[1 / 8, 2 / 6, 5 / 8, 6 / 6], [0.0, 0.0, 1.0, 1.0]],
                          [[3 / 8, 0.0, 3.5 / 8, 1 / 6], [2 / 8, 1 / 6, 2 / 8, 4 / 6]]])
    sums, mass = _box_sums(tokens, (h, w), boxes)
    assert torch.allclose(sums[0, 0], grid_map[0, 2:6, 1:5].sum((0, 1)), atol=1e-5) and mass[0, 0] == 16
    assert torch.allclose(sums[0, 1], grid_map[0].sum((0, 1)), atol=1e-5) and mass[0, 1] == h * w
    assert torch.allclose(sums[1, 0], 0.5 * grid_map[1, 0, 3], atol=1e-6) and torch.isclose(mass[1, 0], torch.tensor(0.5))
    assert sums[1, 1].abs().sum() == 0 and mass[1, 1] == 0  # zero width
