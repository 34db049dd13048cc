"""A relation graph people can read, at any input size (matplotlib, Agg).

The image is drawn at a display size between ``min_side`` and ``max_side`` pixels on its longer
side (a 64 px crop is scaled up, a 24 MP photo down), so text is always the same legible size.
Each box gets its number and one colour, and every edge leaving a subject is drawn in that
subject's colour, with an arrowhead at the object. Edge labels are placed greedily, best triplet
first: candidate spots along the edge, then a widening ring around its midpoint (with a leader
line), scored by overlap with labels already placed (refused), with boxes' outlines and number
tags (penalised) and by distance; a label that finds no free spot inside the picture is left out
of the picture and kept in the table. Beside the image a compact table lists the top triplets.

    render_graph_png(image, boxes, triplets, names=None) -> PNG bytes
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

__all__ = ["render_graph_png", "render_graph", "Rendering"]

_DPI = 100


@dataclass
class Rendering:
    """What was drawn: the PNG and, in figure pixels (x0, y0, x1, y1, y up), every placed edge label."""

    png: bytes
    size: tuple[int, int]  # (width, height) of the PNG
    label_boxes: list[tuple[float, float, float, float]] = field(default_factory=list)
    labelled: list[int] = field(default_factory=list)  # triplet indices whose edge label is in the picture
    image_box: tuple[float, float, float, float] = (0, 0, 0, 0)  # the image panel in figure pixels


def _colours(n: int) -> list:
    import matplotlib

    cmap = matplotlib.colormaps["tab20" if n > 10 else "tab10"]
    return [cmap(i % cmap.N) for i in range(max(n, 1))]


def _overlap(a, b) -> float:
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    return w * h if w > 0 and h > 0 else 0.0


def _outline_overlap(lab, box, width: float = 3.0) -> float:
    """Area of ``lab`` over the outline strips of ``box`` (crossing a box edge hides it; sitting inside does not)."""
    x0, y0, x1, y1 = box
    strips = [(x0 - width, y0 - width, x1 + width, y0 + width), (x0 - width, y1 - width, x1 + width, y1 + width),
              (x0 - width, y0 - width, x0 + width, y1 + width), (x1 - width, y0 - width, x1 + width, y1 + width)]
    return sum(_overlap(lab, s) for s in strips)


def _candidates(a: np.ndarray, b: np.ndarray, step: float):
    """Spots for an edge's label: along the edge first, then rings around the midpoint."""
    for t in (0.5, 0.38, 0.62, 0.28, 0.72):
        yield a + (b - a) * t, False
    mid = (a + b) / 2
    for ring in range(1, 14):
        r = ring * step
        for k in range(8 + 4 * ring):
            ang = 2 * np.pi * k / (8 + 4 * ring)
            yield mid + r * np.array([np.cos(ang), np.sin(ang)]), True


def render_graph(image: np.ndarray, boxes: np.ndarray, triplets: Sequence[dict], names: Sequence[str] | None = None,
                 top: int = 12, table_rows: int = 15, min_side: int = 720, max_side: int = 1400,
                 font_size: float = 10.0) -> Rendering:
    """Draw ``boxes`` (N, 4 pixels) on ``image`` (H, W, 3 uint8) with the ``top`` best ``triplets``
    (dicts with subject, object, predicate, score) as labelled arrows, and a table of the first
    ``table_rows`` beside it. ``names``: optional per-box labels shown with the numbers."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure
    from matplotlib.patches import FancyArrowPatch, Rectangle

    image = np.asarray(image)
    boxes = np.asarray(boxes, dtype=float).reshape(-1, 4)
    h, w = image.shape[:2]
    scale = min_side / max(h, w) if max(h, w) < min_side else min(1.0, max_side / max(h, w))
    iw, ih = w * scale, h * scale
    rows = list(triplets)[:table_rows]
    table_w = 380.0 if rows else 0.0
    line_h = font_size * 1.9
    fig_w, fig_h = iw + table_w, max(ih, (len(rows) + 2) * line_h + 20)
    fig = Figure(figsize=(fig_w / _DPI, fig_h / _DPI), dpi=_DPI)
    canvas_ax = fig.add_axes((0, 1 - ih / fig_h, iw / fig_w, ih / fig_h))
    if scale < 1 and image.dtype == np.uint8:  # drawn down: resized once here, so matplotlib, which resamples
        from PIL import Image  # in floats (about 11x the picture's bytes), only ever holds the display size

        image = np.asarray(Image.fromarray(image).resize((max(1, round(iw)), max(1, round(ih))),
                                                         Image.Resampling.LANCZOS))
    canvas_ax.imshow(image, extent=(0, w, h, 0), interpolation="nearest" if scale >= 2 else "antialiased")
    canvas_ax.set_xlim(0, w)
    canvas_ax.set_ylim(h, 0)
    canvas_ax.set_axis_off()
    cols = _colours(len(boxes))
    names = list(names) if names is not None else [""] * len(boxes)

    def label_of(i: int) -> str:
        return f"{i + 1} {names[i]}".strip() if i < len(names) and names[i] else str(i + 1)

    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    renderer = canvas.get_renderer()
    to_disp = canvas_ax.transData
    img_box = canvas_ax.get_window_extent(renderer).extents

    lw = 2.0
    disp_boxes, tags = [], []
    for i, (x1, y1, x2, y2) in enumerate(boxes):
        canvas_ax.add_patch(Rectangle((x1, y1), x2 - x1, y2 - y1, fill=False, edgecolor=cols[i], linewidth=lw))
        p0, p1 = to_disp.transform([(x1, y2)]), to_disp.transform([(x2, y1)])
        disp_boxes.append((p0[0, 0], p0[0, 1], p1[0, 0], p1[0, 1]))
        t = canvas_ax.text(x1, y1, label_of(i), color="white", fontsize=font_size * 0.9, fontweight="bold",
                           parse_math=False, va="top", ha="left", bbox=dict(boxstyle="square,pad=0.15", fc=cols[i], ec="none"),
                           clip_on=True, zorder=5)
        tags.append(tuple(t.get_window_extent(renderer).extents))

    centres = np.stack([(boxes[:, 0] + boxes[:, 2]) / 2, (boxes[:, 1] + boxes[:, 3]) / 2], 1) if len(boxes) else None
    placed: list[tuple[float, float, float, float]] = []
    labelled: list[int] = []
    inv = to_disp.inverted()
    for k, t in enumerate(list(triplets)[:top]):
        s, o = int(t["subject"]), int(t["object"])
        a, b = to_disp.transform(centres[[s, o]])
        colour = cols[s]
        canvas_ax.add_patch(FancyArrowPatch(tuple(centres[s]), tuple(centres[o]), arrowstyle="-|>",
                                            mutation_scale=14, color=colour, linewidth=1.8, shrinkA=4, shrinkB=6,
                                            connectionstyle="arc3,rad=0.08", zorder=4))
        txt = canvas_ax.text(0, 0, f"{k + 1}. {t['predicate']}", fontsize=font_size, ha="center", va="center",
                             parse_math=False,
                             color="black", zorder=7,
                             bbox=dict(boxstyle="round,pad=0.2", fc="white", ec=colour, lw=1.2, alpha=0.92))
        tw, th = (lambda e: (e[2] - e[0], e[3] - e[1]))(txt.get_window_extent(renderer).extents)
        best, best_cost = None, np.inf
        for pos, leader in _candidates(np.asarray(a), np.asarray(b), step=th * 1.1):
            lab = (pos[0] - tw / 2, pos[1] - th / 2, pos[0] + tw / 2, pos[1] + th / 2)
            if lab[0] < img_box[0] or lab[2] > img_box[2] or lab[1] < img_box[1] or lab[3] > img_box[3]:
                continue
            if any(_overlap(lab, p) > 0 for p in placed):
                continue
            cost = sum(_outline_overlap(lab, d) for d in disp_boxes) + 4 * sum(_overlap(lab, g) for g in tags)
            cost += 0.05 * float(np.hypot(*(pos - (np.asarray(a) + np.asarray(b)) / 2))) + (20.0 if leader else 0.0)
            if cost < best_cost:
                best, best_cost = (pos, lab, leader), cost
                if cost < 1e-9:
                    break
        if best is None:  # no free spot in the picture: the table still lists it
            txt.remove()
            continue
        pos, lab, leader = best
        txt.set_position(tuple(inv.transform([pos])[0]))
        if leader:
            mid = inv.transform([(np.asarray(a) + np.asarray(b)) / 2])[0]
            canvas_ax.plot([mid[0], inv.transform([pos])[0][0]], [mid[1], inv.transform([pos])[0][1]], color=colour,
                           lw=0.8, ls=":", zorder=6)
        placed.append(lab)
        labelled.append(k)

    if rows:
        tab = fig.add_axes((iw / fig_w, 0, table_w / fig_w, 1))
        tab.set_axis_off()
        tab.set_xlim(0, table_w)
        tab.set_ylim(fig_h, 0)
        tab.text(12, 14, "top triplets (subject → predicate → object)", fontsize=font_size, fontweight="bold",
                 va="top")
        for r, t in enumerate(rows):
            y = 14 + (r + 1.3) * line_h
            s, o = int(t["subject"]), int(t["object"])
            tab.add_patch(Rectangle((12, y - font_size * 0.55), 8, font_size * 1.1, color=cols[s]))
            tab.text(26, y, f"{r + 1}. {label_of(s)} → {t['predicate']} → {label_of(o)}", fontsize=font_size * 0.95,
                     parse_math=False,
                     va="center", clip_on=True)
            score = "" if t.get("score") is None else f"{float(t['score']):.3f}"  # edges a client gave: no score
            tab.text(table_w - 10, y, score, fontsize=font_size * 0.95,
                     va="center", ha="right", family="monospace")
    buf = io.BytesIO()
    canvas.print_png(buf)
    size = (int(round(fig_w)), int(round(fig_h)))
    return Rendering(buf.getvalue(), size, placed, labelled, tuple(float(v) for v in img_box))


def render_graph_png(image: np.ndarray, boxes: np.ndarray, triplets: Sequence[dict],
                     names: Sequence[str] | None = None, **kw) -> bytes:
    """PNG bytes of :func:`render_graph`."""
    return render_graph(image, boxes, triplets, names, **kw).png
