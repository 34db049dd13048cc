"""Drawing the synthetic world: the palette, one flat shape per category, cast shadows.

``relate.data.synthetic`` decides what is in a scene; this module only paints it. Objects are
drawn back to front and each darkens the objects already drawn behind it along its lower-right
edge, a monocular depth cue inside the occluded object's box.
"""

from __future__ import annotations

import numpy as np
from PIL import Image, ImageDraw

from relate.data.synthetic_object import SceneObject

__all__ = ["PALETTE", "SKIN", "INVERTED", "shape_mask", "render"]

PALETTE: dict[str, tuple[int, int, int]] = {
    "red": (214, 40, 40), "green": (46, 160, 67), "blue": (40, 90, 220), "yellow": (240, 210, 50),
    "orange": (245, 130, 30), "purple": (130, 60, 170), "white": (240, 240, 235), "black": (25, 25, 30),
    "grey": (128, 128, 128), "brown": (120, 75, 35), "pink": (240, 140, 190), "cyan": (60, 200, 210),
}
SKIN = (224, 172, 135)
# A twin scene's colours (relate.data.synthetic.make_scene(twin=True)): each palette colour's
# complement, whose luminance is exactly 255 minus the original's, so every brightness gap is kept
# and its direction reversed. Never drawn in an ordinary scene.
INVERTED: dict[str, tuple[int, int, int]] = {f"inverse_{k}": (255 - r, 255 - g, 255 - b) for k, (r, g, b) in PALETTE.items()}


def _rgb(rng: np.random.Generator, colour: str) -> tuple[int, int, int]:
    base = np.array(SKIN if colour == "skin" else PALETTE.get(colour) or INVERTED[colour], dtype=np.int64)
    return tuple(int(v) for v in np.clip(base + rng.integers(-12, 13, size=3), 0, 255))


def _shade(rgb: tuple[int, int, int], f: float) -> tuple[int, int, int]:
    return tuple(int(min(255, max(0, c * f))) for c in rgb)  # type: ignore[return-value]


def _draw(d: ImageDraw.ImageDraw, o: SceneObject, rgb: tuple[int, int, int]) -> None:
    x1, y1, x2, y2 = (float(v) for v in o.box)
    w, h = x2 - x1, y2 - y1
    dark = _shade(rgb, 0.6)
    c = o.category
    if c == "person":
        d.rectangle([x1 + 0.1 * w, y1 + 0.22 * h, x2 - 0.1 * w, y1 + 0.65 * h], fill=rgb)
        d.rectangle([x1 + 0.2 * w, y1 + 0.65 * h, x2 - 0.2 * w, y2], fill=dark)
    elif c in ("head", "ball"):
        d.ellipse([x1, y1, x2, y2], fill=rgb)
    elif c == "hand":
        d.ellipse([x1, y1 + 0.15 * h, x2, y2 - 0.15 * h], fill=rgb)
    elif c == "table":
        d.rectangle([x1, y1, x2, y1 + 0.3 * h], fill=rgb)
        d.rectangle([x1 + 0.05 * w, y1, x1 + 0.12 * w, y2], fill=dark)
        d.rectangle([x2 - 0.12 * w, y1, x2 - 0.05 * w, y2], fill=dark)
    elif c == "box":
        d.rectangle([x1, y1, x2, y2], fill=rgb)
        d.rectangle([x1 + 0.08 * w, y1 + 0.08 * h, x2 - 0.08 * w, y2 - 0.08 * h], fill=dark)
    elif c == "cup":
        d.rectangle([x1, y1, x1 + 0.75 * w, y2], fill=rgb)
        d.arc([x1 + 0.5 * w, y1 + 0.2 * h, x2, y2 - 0.2 * h], -90, 90, fill=rgb, width=max(1, int(0.1 * w)))
    elif c == "lamp":
        d.polygon([(x1 + 0.5 * w, y1), (x1, y1 + 0.5 * h), (x2, y1 + 0.5 * h)], fill=rgb)
        d.rectangle([x1 + 0.45 * w, y1 + 0.5 * h, x1 + 0.55 * w, y2], fill=dark)
    elif c == "plant":
        d.ellipse([x1, y1, x2, y1 + 0.65 * h], fill=rgb)
        d.rectangle([x1 + 0.25 * w, y1 + 0.6 * h, x2 - 0.25 * w, y2], fill=dark)
    elif c == "chair":
        d.rectangle([x1, y1, x1 + 0.2 * w, y2], fill=rgb)
        d.rectangle([x1, y1 + 0.5 * h, x2, y1 + 0.65 * h], fill=rgb)
        d.rectangle([x2 - 0.15 * w, y1 + 0.5 * h, x2, y2], fill=dark)
    elif c == "dog":
        d.ellipse([x1, y1 + 0.25 * h, x1 + 0.8 * w, y1 + 0.75 * h], fill=rgb)
        d.ellipse([x1 + 0.6 * w, y1, x2, y1 + 0.45 * h], fill=rgb)
        d.rectangle([x1 + 0.1 * w, y1 + 0.7 * h, x1 + 0.25 * w, y2], fill=dark)
        d.rectangle([x1 + 0.55 * w, y1 + 0.7 * h, x1 + 0.7 * w, y2], fill=dark)
    elif c == "hat":
        d.rectangle([x1 + 0.15 * w, y1, x2 - 0.15 * w, y2 - 0.25 * h], fill=rgb)
        d.rectangle([x1, y2 - 0.3 * h, x2, y2], fill=dark)
    elif c == "bag":
        d.rounded_rectangle([x1, y1 + 0.3 * h, x2, y2], radius=max(1, int(0.15 * w)), fill=rgb)
        d.arc([x1 + 0.2 * w, y1, x2 - 0.2 * w, y1 + 0.6 * h], 180, 360, fill=dark, width=max(1, int(0.08 * w)))
    else:  # book and anything new: a plain block with a spine
        d.rectangle([x1, y1, x2, y2], fill=rgb)
        d.rectangle([x1, y1, x1 + 0.15 * w, y2], fill=dark)
    if o.striped and c not in ("head", "hand"):
        step = max(3, int(min(w, h) / 4))
        for yy in range(int(y1) + step, int(y2), step):
            d.line([(x1 + 0.3 * w, yy), (x2 - 0.3 * w, yy)], fill=_shade(rgb, 1.25), width=1)


def shape_mask(o: SceneObject, w: int, h: int) -> np.ndarray:
    """(h, w) bool: the pixels the object's shape covers when drawn alone."""
    canvas = Image.new("RGB", (w, h), (0, 0, 0))
    _draw(ImageDraw.Draw(canvas), o, (255, 255, 255))
    return np.asarray(canvas)[..., 0] > 0


# Cast shadows: each object darkens the objects already drawn behind it (never the background)
# along its lower-right edge, offset by this share of its smaller side, at least _SHADOW_MIN_PX.
_SHADOW_OFFSET = 0.18
_SHADOW_MIN_PX = 3
_SHADOW_DARKEN = 0.45


def render(objs: list[SceneObject], shapes: list[np.ndarray], rng: np.random.Generator, w: int, h: int) -> np.ndarray:
    """Draw objects back to front; each casts a shadow on the objects behind it, a monocular depth
    cue that sits inside the occluded object's box while the front object's own shape stays whole."""
    canvas = Image.fromarray(_background(rng, w, h))
    covered = np.zeros((h, w), dtype=bool)
    for k in sorted(range(len(objs)), key=lambda k: objs[k].z):
        o = objs[k]
        rgb = _rgb(rng, o.colour)
        mask = shapes[k]
        if covered.any():
            side = min(o.box[2] - o.box[0], o.box[3] - o.box[1])
            d = int(max(_SHADOW_MIN_PX, round(_SHADOW_OFFSET * side)))
            shadow = np.zeros_like(mask)
            shadow[d:, d:] = mask[:-d, :-d]
            shadow &= covered & ~mask
            if shadow.any():
                arr = np.array(canvas)
                arr[shadow] = (arr[shadow] * _SHADOW_DARKEN).astype(np.uint8)
                canvas = Image.fromarray(arr)
        _draw(ImageDraw.Draw(canvas), o, rgb)
        covered |= mask
    return canvas


def _background(rng: np.random.Generator, w: int, h: int) -> np.ndarray:
    top, bottom = rng.integers(40, 200, size=3), rng.integers(40, 200, size=3)
    t = np.linspace(0.0, 1.0, h, dtype=np.float32)[:, None, None]
    img = (1 - t) * top[None, None] + t * bottom[None, None] + rng.integers(-10, 11, size=(h, 1, 3))
    return np.broadcast_to(img, (h, w, 3)).clip(0, 255).astype(np.uint8)
