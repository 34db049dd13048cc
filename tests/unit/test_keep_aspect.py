"""Keeping the image's proportions on the way into the model (``model.backbone.keep_aspect``).

The outside reference is the synthetic world's own pair rules (``relate.data.synthetic_truth``):
"left of" against "above" compares the centres' offsets on the two axes, and "near" compares a gap
with a diagonal, both in the picture's pixels. Scaling both axes by one factor keeps every such
decision; stretching a non-square picture to the model's square does not.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import torch
from PIL import Image

from relate.api import LETTERBOX_FILL, RelationPredictor, input_scale, prepare_image
from relate.data.synthetic_truth import PairRules
from relate.model import create_relation_model
from train_jobs.relation_data import DataConfig, DecodeStage


def _decisions(boxes: np.ndarray) -> list:
    rules = PairRules(boxes, [np.zeros((1, 1), bool)] * len(boxes))
    return [(rules.spatial(a, b), rules.near(a, b)) for a in range(len(boxes)) for b in range(len(boxes)) if a != b]


def test_a_hand_worked_pair_keeps_its_relation_only_when_the_aspect_is_kept():
    # 224 x 128 picture; b lies 30 px right of and 20 px below a (gap 30 across, 20 down: "left of")
    a, b = [10, 10, 40, 40], [70, 60, 100, 90]
    boxes = np.array([a, b], float)
    assert PairRules(boxes, [np.zeros((1, 1), bool)] * 2).spatial(0, 1) == "left_of"
    sx, sy = input_scale(128, 224, 96)  # stretched: 0.43 across, 0.75 down
    stretched = boxes * [sx, sy, sx, sy]
    assert PairRules(stretched, [np.zeros((1, 1), bool)] * 2).spatial(0, 1) == "above"  # the offsets swap order
    kx, ky = input_scale(128, 224, 96, keep_aspect=True)
    assert kx == ky == pytest.approx(96 / 224)
    assert PairRules(boxes * kx, [np.zeros((1, 1), bool)] * 2).spatial(0, 1) == "left_of"


def test_the_worlds_rules_survive_kept_aspect_and_not_stretching():
    rng = np.random.default_rng(0)
    kept_changed = stretched_changed = total = 0
    for _ in range(60):
        w, h = int(rng.integers(128, 225)), int(rng.integers(128, 225))
        xy = np.sort(rng.uniform(0, 1, (6, 2, 2)), axis=1) * [w, h]
        boxes = np.concatenate([xy[:, 0], xy[:, 1]], axis=1)  # x1, y1, x2, y2
        truth = _decisions(boxes)
        k = input_scale(h, w, 96, keep_aspect=True)[0]
        sx, sy = input_scale(h, w, 96)
        kept_changed += sum(x != y for x, y in zip(truth, _decisions(boxes * k)))
        stretched_changed += sum(x != y for x, y in zip(truth, _decisions(boxes * [sx, sy, sx, sy])))
        total += len(truth)
    assert kept_changed == 0
    assert stretched_changed > 0.02 * total  # what stretching costs, and why the option exists


def test_prepare_image_puts_the_picture_top_left_at_one_scale_and_fills_the_rest():
    img = np.zeros((120, 240, 3), np.uint8)
    img[30:90, 60:120] = (255, 0, 0)  # a red square, 60 px a side
    x = prepare_image(img, 96, "bilinear", keep_aspect=True)
    s = input_scale(120, 240, 96, keep_aspect=True)[0]
    assert s == pytest.approx(0.4)
    assert torch.all(x[:, 48:, :] == LETTERBOX_FILL)  # 120 * 0.4 = 48 rows of picture, the rest filled
    red = (x[0] > 0.5) & (x[1] < 0.5)
    ys, xs = torch.nonzero(red, as_tuple=True)
    assert (ys.min().item(), ys.max().item() + 1) == (round(30 * s), round(90 * s))  # still square: 24 x 24
    assert (xs.min().item(), xs.max().item() + 1) == (round(60 * s), round(120 * s))
    stretched = prepare_image(img, 96, "bilinear")
    assert not torch.any(stretched == LETTERBOX_FILL)
    with pytest.raises(ValueError, match="positive"):
        input_scale(0, 10, 96)


def test_decode_stage_and_predictor_hand_the_model_the_same_kept_boxes(tmp_path):
    from test_model_forward_api import random_bank, tiny_cfg

    img = np.zeros((64, 128, 3), np.uint8)
    img[16:48, 32:64] = (0, 255, 0)
    uri = tmp_path / "a.png"
    Image.fromarray(img).save(uri)
    box = {"x1": 32.0, "y1": 16.0, "x2": 64.0, "y2": 48.0, "category": "cup", "is_body_part": False}
    other = {"x1": 80.0, "y1": 8.0, "x2": 120.0, "y2": 56.0, "category": "cup", "is_body_part": False}
    row = pa.Table.from_pylist([{"uri": str(uri), "width": 128, "height": 64, "boxes": [box, other],
                                 "relations": [], "source": "*"}])
    out = DecodeStage(32, DataConfig(photometric=0.0, max_boxes=2), [], ["cup"], keep_aspect=True)(row)
    assert np.allclose(out["boxes"][0, 0], [8, 4, 16, 12])  # 32 / 128 on both axes
    assert (out["image"][0, 16:] == round(LETTERBOX_FILL * 255)).all()
    green = out["image"][0, 4:12, 8:16]
    assert (green[..., 1] > 200).all() and (green[..., 0] < 50).all()  # the box still frames its object

    seen = {}
    model = create_relation_model(tiny_cfg(backbone=tiny_cfg().backbone.model_copy(update={"keep_aspect": True})))
    real_forward = model.forward

    def spy(images, boxes, *args, **kw):
        seen["images"], seen["boxes"], seen["masks"] = images.clone(), boxes.clone(), kw.get("masks")
        return real_forward(images, boxes, *args, **kw)

    model.forward = spy
    predictor = RelationPredictor(model.eval(), random_bank(["on", "near"]))
    predictor.score_images([img], [[[32, 16, 64, 48], [80, 8, 120, 56]]])
    assert torch.allclose(seen["boxes"][0, :2], torch.from_numpy(out["boxes"][0]))
    assert torch.allclose(seen["images"][0].permute(1, 2, 0) * 255, torch.from_numpy(out["image"][0]).float(), atol=1)
    # masks take the same scale: the green square's mask lands on its kept box, nothing in the fill
    masks = np.zeros((2, 64, 128), bool)
    masks[0, 16:48, 32:64] = masks[1, 8:56, 80:120] = True
    predictor.score_images([img], [masks])
    m = seen["masks"][0, 0]
    assert m[4:12, 8:16].all() and m.sum() == 64 and seen["masks"][0, :, 16:].sum() == 0
