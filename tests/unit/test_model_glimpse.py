"""The region glimpse: each box resampled to a fixed crop, and a CNN that learns to name its shape."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from relate.model.config import BackboneConfig, RelationModelConfig
from relate.model.glimpse import RegionGlimpse, glimpse_crops
from relate.model.model import create_relation_model


def test_a_crop_is_the_box_pixels_or_the_means_of_their_blocks():
    """Reference: numpy slicing. A box of exactly ``side`` pixels comes back pixel for pixel (one bilinear
    sample at each pixel centre); a box of twice the side comes back as the means of its 2 x 2 blocks."""
    rng = np.random.default_rng(0)
    img = rng.random((3, 40, 48)).astype(np.float32)
    boxes = torch.tensor([[[5, 3, 13, 11], [16, 4, 32, 20]]], dtype=torch.float32)  # 8 x 8 and 16 x 16
    crops = glimpse_crops(torch.from_numpy(img)[None], boxes, 8)
    assert crops.shape == (2, 3, 8, 8)
    np.testing.assert_allclose(crops[0].numpy(), img[:, 3:11, 5:13], atol=1e-6)
    blocks = img[:, 4:20, 16:32].reshape(3, 8, 2, 8, 2).mean(axis=(2, 4))
    np.testing.assert_allclose(crops[1].numpy(), blocks, atol=1e-6)


def _shapes(n: int, rng: np.random.Generator, blank: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``n`` 32 x 32 pictures of one shape each, a filled square (label 0) or a ring of the same colour
    and box (label 1), 7-14 px a side on a grey ground: only the shape tells them apart."""
    imgs = torch.full((n, 3, 32, 32), 0.5)
    boxes = torch.zeros(n, 1, 4)
    labels = torch.from_numpy(rng.integers(0, 2, n))
    for k in range(n):
        s = int(rng.integers(7, 15))
        x, y = (int(v) for v in rng.integers(0, 32 - s, 2))
        colour = torch.from_numpy(rng.random(3).astype(np.float32))[:, None, None]
        if not blank:
            imgs[k, :, y:y + s, x:x + s] = colour
            if labels[k]:
                imgs[k, :, y + 2:y + s - 2, x + 2:x + s - 2] = 0.5
        boxes[k, 0] = torch.tensor([x, y, x + s, y + s], dtype=torch.float32)
    return imgs, boxes, labels


@pytest.mark.parametrize("blank", [False, True])
def test_the_glimpse_learns_a_shape_its_box_does_not_tell(blank):
    """Squares and rings of random colour share their boxes' sizes and places: a classifier on the glimpse
    names the shape of held-out pictures after 150 steps; with the pixels blanked it stays at chance."""
    torch.manual_seed(0)
    rng = np.random.default_rng(1)
    glimpse = RegionGlimpse(16, side=12, width=8)
    head = torch.nn.Linear(16, 2)
    opt = torch.optim.Adam([*glimpse.parameters(), *head.parameters()], lr=3e-3)
    for _ in range(150):
        imgs, boxes, labels = _shapes(32, rng, blank)
        loss = F.cross_entropy(head(glimpse(imgs, boxes)[:, 0]), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
    imgs, boxes, labels = _shapes(200, np.random.default_rng(2), blank)
    with torch.no_grad():
        acc = float((head(glimpse(imgs, boxes)[:, 0]).argmax(-1) == labels).float().mean())
    if blank:
        assert acc < 0.65
    else:
        assert acc > 0.95


def test_the_model_adds_the_glimpse_to_each_box_feature():
    """With the glimpse on, a box's grounding embedding changes when only the pixels inside that box
    change, and the module's weights are in the state dict; off, no key and no module."""
    cfg = RelationModelConfig(backbone=BackboneConfig(name="vit_tiny_patch16_224", img_size=32, depth=1,
                                                      patch_size=8, taps=[-1]),
                              dim=32, heads=4, text_dim=16, pair_layers=0, joint_layers=0, scene_grid=2,
                              region_glimpse=8)
    torch.manual_seed(0)
    model = create_relation_model(cfg).eval()
    assert any(k.startswith("glimpse.") for k in model.state_dict())
    plain = create_relation_model(cfg.model_copy(update={"region_glimpse": 0}))
    assert plain.glimpse is None and not any(k.startswith("glimpse.") for k in plain.state_dict())
    images = torch.rand(1, 3, 32, 32)
    boxes = torch.tensor([[[2, 2, 12, 12], [18, 18, 30, 30]]], dtype=torch.float32)
    valid = torch.ones(1, 2, dtype=torch.bool)
    bank = torch.randn(3, 16)
    changed = images.clone()
    changed[:, :, 3:11, 3:11] = 1 - changed[:, :, 3:11, 3:11]
    with torch.no_grad():
        g0 = model(images, boxes, valid, bank).grounding
        g1 = model(changed, boxes, valid, bank).grounding
        model.glimpse.net[-1].weight.zero_()
        model.glimpse.net[-1].bias.zero_()
        h0 = model(images, boxes, valid, bank).grounding
        h1 = model(changed, boxes, valid, bank).grounding
    glimpse_part = (g1 - g0) - (h1 - h0)  # what the glimpse adds to the change, backbone's share removed
    changed_box, other_box = glimpse_part[0].abs().amax(-1).tolist()
    assert changed_box > 1e-3 and other_box < 0.02 * changed_box  # the other box's crop did not change


def test_a_crop_below_four_pixels_is_refused():
    with pytest.raises(ValueError, match="at least 4 pixels"):
        RegionGlimpse(8, side=3)
