"""Numbered markers and the two judge renderings."""

from __future__ import annotations

import numpy as np
import pytest

from relate.markers import (OBJECT_COLOUR, PALETTE, SUBJECT_COLOUR, decode_image, draw_markers, encode_png,
                            marker_radius, render_judge_all, render_judge_pair)

BOXES = [dict(x1=10, y1=10, x2=60, y2=50), dict(x1=80, y1=30, x2=150, y2=110), dict(x1=0, y1=0, x2=4, y2=4)]


def _img(h=120, w=160, value=128):
    return np.full((h, w, 3), value, np.uint8)


def test_same_input_gives_same_bytes_and_input_is_untouched():
    img = _img()
    a, b = encode_png(draw_markers(img, BOXES)), encode_png(draw_markers(img.copy(), BOXES))
    assert a == b and (img == 128).all()
    assert (decode_image(a) == draw_markers(img, BOXES)).all()


def test_a_dot_of_the_box_colour_sits_at_each_centre_with_a_number():
    out = draw_markers(_img(), BOXES[:2])
    r = marker_radius(160, 120)
    for i, b in enumerate(BOXES[:2]):
        cx, cy = int((b["x1"] + b["x2"]) / 2), int((b["y1"] + b["y2"]) / 2)
        patch = out[cy - r + 2: cy + r - 1, cx - r + 2: cx + r - 1].reshape(-1, 3)
        colour = np.array(PALETTE[i])
        assert (np.abs(patch.astype(int) - colour).sum(1) < 10).mean() > 0.4       # the dot
        assert (np.abs(patch.astype(int) - colour).sum(1) >= 10).mean() > 0.05     # the digit on it


@pytest.mark.parametrize("size", [(48, 64), (480, 640), (2000, 3000)])
def test_dots_scale_with_the_image(size):
    h, w = size
    r = marker_radius(w, h)
    assert r >= 7 and r >= 0.02 * min(w, h)
    boxes = [dict(x1=0, y1=0, x2=w / 2, y2=h / 2)]
    out = draw_markers(_img(h, w), boxes)
    changed = (out != 128).any(-1)
    assert changed.sum() >= 3.0 * r * r  # the whole dot was drawn, not a speck


def test_dots_near_the_border_stay_inside_the_image():
    out = draw_markers(_img(), [BOXES[2]])
    assert (out != 128).any() and out.shape == (120, 160, 3)


def test_numbers_start_at_id_base():
    a = draw_markers(_img(), BOXES[:1], id_base=0)
    b = draw_markers(_img(), BOXES[:1], id_base=1)
    assert not (a == b).all()


def test_outlines_and_judge_renderings():
    plain = draw_markers(_img(), BOXES[:2])
    outlined = render_judge_all(_img(), BOXES[:2])
    assert (outlined != plain).any()
    assert (outlined[30, 10] == PALETTE[0]).all()  # left edge of box 0
    pair = render_judge_pair(_img(), BOXES, 1, 0)
    assert (pair[70, 80] == SUBJECT_COLOUR).all()   # box 1 = subject: red outline
    assert (pair[30, 10] == OBJECT_COLOUR).all()    # box 0 = object: blue outline
    assert (pair[:6, :6] == 128).all()              # box 2 is not drawn
    with pytest.raises(ValueError, match="same box"):
        render_judge_pair(_img(), BOXES, 1, 1)


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="uint8"):
        draw_markers(np.zeros((10, 10), np.float32), BOXES)
    with pytest.raises(IndexError, match="out of range"):
        draw_markers(_img(), BOXES, indices=[5])
