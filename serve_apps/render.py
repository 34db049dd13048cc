"""The rendered graph: numbered boxes (``relate.markers``) plus one arrow per relation, as PNG bytes."""

from __future__ import annotations

from typing import Sequence

import numpy as np
from PIL import Image, ImageDraw

__all__ = ["render_graph_png"]


def _arrow(draw: ImageDraw.ImageDraw, a: tuple[float, float], b: tuple[float, float], rgb, width: int) -> None:
    draw.line([a, b], fill=rgb, width=width)
    v = np.subtract(b, a).astype(float)
    n = float(np.hypot(*v))
    if n < 1e-6:
        return
    u, p = v / n, np.array([-v[1], v[0]]) / n
    head = max(6.0, 3.0 * width)
    base = np.asarray(b) - u * head
    draw.polygon([tuple(b), tuple(base + p * head / 2), tuple(base - p * head / 2)], fill=rgb)


def render_graph_png(image: np.ndarray, boxes: np.ndarray, triplets: Sequence[dict], id_base: int = 1) -> bytes:
    """PNG of ``image`` with every box outlined and numbered, and subject -> object arrows labelled
    with their predicate (numbers are box index + ``id_base``, as in the API's responses + 1)."""
    from relate.markers import PALETTE, draw_markers, encode_png, label_font, marker_radius

    marked = draw_markers(image, boxes, id_base=id_base, outlines=True)
    pil = Image.fromarray(marked)
    draw = ImageDraw.Draw(pil)
    h, w = marked.shape[:2]
    r = marker_radius(w, h)
    centres = np.stack([(boxes[:, 0] + boxes[:, 2]) / 2, (boxes[:, 1] + boxes[:, 3]) / 2], 1)
    font = label_font(max(8, int(r * 1.1)))
    for k, t in enumerate(triplets):
        s, o = int(t["subject"]), int(t["object"])
        rgb = PALETTE[s % len(PALETTE)]
        a, b = centres[s], centres[o]
        # stop the arrow at the object's dot so the number stays readable
        v = b - a
        n = float(np.hypot(*v))
        tip = b - v / n * (r + 2) if n > 2 * r else b
        _arrow(draw, tuple(a), tuple(tip), rgb, max(1, r // 4))
        mid = (a + tip) / 2 + np.array([0, (k % 3 - 1) * r])  # stagger labels of parallel edges
        label = str(t["predicate"])
        box = draw.textbbox(tuple(mid), label, font=font, anchor="mm")
        draw.rectangle(box, fill=(255, 255, 255))
        draw.text(tuple(mid), label, fill=(0, 0, 0), font=font, anchor="mm")
    return encode_png(np.asarray(pil))
