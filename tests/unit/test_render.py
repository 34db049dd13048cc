"""relate.render: legible at any input size, edge labels that never overlap, a triplet table."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

from relate.render import render_graph, render_graph_png


def _crowded(n_boxes=12, n_edges=14, side=(64, 48), seed=0):
    rng = np.random.default_rng(seed)
    h, w = side
    img = (rng.random((h, w, 3)) * 255).astype(np.uint8)
    xy = rng.random((n_boxes, 2)) * [w * 0.8, h * 0.8]
    boxes = np.concatenate([xy, xy + 4 + rng.random((n_boxes, 2)) * 8], 1).clip(0, [w, h, w, h])
    trip = [{"subject": i % n_boxes, "object": (i * 5 + 1) % n_boxes, "score": 1 - i / 30,
             "predicate": ["sitting on", "holding", "next to", "behind"][i % 4]} for i in range(n_edges)]
    return img, boxes, trip


def _overlap(a, b) -> float:
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    return w * h if w > 0 and h > 0 else 0.0


def test_crowded_small_image_labels_do_not_overlap_and_are_scaled_up():
    img, boxes, trip = _crowded()
    r = render_graph(img, boxes, trip, names=["person", "cup"] * 6, top=12)
    png = Image.open(io.BytesIO(r.png))
    assert png.size == r.size
    ix0, iy0, ix1, iy1 = r.image_box
    assert max(ix1 - ix0, iy1 - iy0) >= 720 - 1  # a 64 px picture is drawn at least 720 px on its long side
    assert len(r.labelled) >= 10  # most of the 12 edge labels found a free spot in a 12-box crowd
    for i, a in enumerate(r.label_boxes):
        assert ix0 <= a[0] and a[2] <= ix1 and iy0 <= a[1] and a[3] <= iy1
        for b in r.label_boxes[i + 1:]:
            assert _overlap(a, b) == 0.0, (a, b)
    # the table lists the triplets beside the picture: the figure is wider than the image panel
    assert png.size[0] >= (ix1 - ix0) + 300


def test_large_image_is_drawn_down_and_empty_graph_draws():
    img = np.zeros((3000, 2000, 3), np.uint8)
    r = render_graph(img, np.array([[10, 10, 500, 800], [600, 900, 1900, 2900]]), [], max_side=1400)
    assert r.size == (int(round(2000 * 1400 / 3000)), 1400)
    png = render_graph_png(img[:10, :10], np.zeros((0, 4)), [])
    assert Image.open(io.BytesIO(png)).size == (720, 720)


def test_edges_take_their_subjects_colour():
    """One colour per subject: pixels of an edge between two far boxes on a white image carry
    the subject's box colour, and two subjects get different colours."""
    img = np.full((100, 200, 3), 255, np.uint8)
    boxes = np.array([[5, 40, 25, 60], [175, 40, 195, 60], [90, 5, 110, 20]], float)
    trip = [{"subject": 0, "object": 1, "predicate": "p", "score": 0.9},
            {"subject": 2, "object": 1, "predicate": "q", "score": 0.8}]
    r = render_graph(img, boxes, trip, top=2)
    arr = np.asarray(Image.open(io.BytesIO(r.png)).convert("RGB")).astype(int)
    scale = (r.image_box[2] - r.image_box[0]) / 200
    fig_h = r.size[1]

    def px(x, y):  # image coordinates -> PNG pixel
        return arr[int(fig_h - r.image_box[3] + y * scale), int(r.image_box[0] + x * scale)]

    box0, box2 = px(5, 50), px(100, 5)  # left edges of boxes 0 and 2
    assert np.abs(box0 - box2).sum() > 60
    # along the 0 -> 1 edge (y ~ 50, slightly curved), away from its label in the middle
    row = [px(x, y) for x in (45, 50, 55) for y in np.arange(44, 56, 0.5)]
    assert min(np.abs(p - box0).sum() for p in row) < 40


def test_dollar_signs_are_text_not_mathtext():
    """Predicates and box names are user strings: '$' pairs are drawn as typed, never parsed as
    matplotlib mathtext (a malformed one would raise)."""
    img = np.full((60, 80, 3), 255, np.uint8)
    boxes = np.array([[5, 5, 30, 30], [45, 25, 75, 55]], float)
    trip = [{"subject": 0, "object": 1, "predicate": r"costs $\frac{1}{ $"},
            {"subject": 1, "object": 0, "predicate": "$x^2$ near"}]
    r = render_graph(img, boxes, trip, names=[r"$\sqrt{", "cup $5$"], top=2)
    assert Image.open(io.BytesIO(r.png)).size == r.size


def test_a_large_picture_is_resized_before_matplotlib_sees_it():
    """A 12 MP upload to /v1/render costs a few times its own bytes, not the ~18x of matplotlib
    resampling it at full size in floats (630 MB traced for these 34 MB)."""
    import tracemalloc

    render_graph_png(np.zeros((50, 50, 3), np.uint8), np.zeros((0, 4)), [])  # imports and font cache first
    img = np.zeros((4000, 3000, 3), np.uint8)
    tracemalloc.start()
    try:
        r = render_graph(img, np.array([[10, 10, 500, 800], [600, 900, 2900, 3900]], float),
                         [{"subject": 0, "object": 1, "predicate": "near"}])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert r.size[1] == 1400
    assert peak < 6 * img.nbytes, peak / img.nbytes
