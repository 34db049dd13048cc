"""Vectorised box geometry shared by the gate, the model, the metrics and the synthetic world.

Boxes are ``(..., 4)`` arrays ``x1, y1, x2, y2`` in pixels. Every function broadcasts over the
leading dimensions and works on NumPy arrays and torch tensors alike (the model calls the same
code on tensors that the gate calls on arrays), so there is one definition of each quantity.
Pairwise matrices come from broadcasting: ``iou(a[:, None], b[None])``.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

# torch is never imported here: a value can only be a tensor if its caller already imported torch,
# so looking it up in sys.modules keeps `import relate.geometry` (and the configs, metrics and
# ingress that use it) free of torch's ~2 s import.
def _tensor_module():
    return sys.modules.get("torch")


__all__ = [
    "N_BOX_FEATURES", "N_MASK_FEATURES", "N_PAIR_FEATURES", "PAIR_FEATURE_NAMES",
    "area", "widths", "heights", "centres", "diag", "intersection_box", "intersection_area",
    "iou", "union_box", "contact_box", "gap", "touch", "containment", "pair_features",
    "mask_features",
]

N_BOX_FEATURES = 15
N_MASK_FEATURES = 4
N_PAIR_FEATURES = N_BOX_FEATURES + N_MASK_FEATURES
PAIR_FEATURE_NAMES = (
    "dx_subject", "dy_subject", "log_w_ratio", "log_h_ratio", "iou",
    "inter_over_subject", "inter_over_object", "dx_union", "dy_union",
    "gap_x_union", "gap_y_union", "log_aspect_subject", "log_aspect_object",
    "subject_over_union", "object_over_union",
    # mask slots: constant for boxes (1, 1, 0, 0), describe shape when masks are given
    "fill_subject", "fill_object", "mask_iou_minus_box_iou", "mask_cover_minus_box_cover",
)
_EPS = 1e-6


def _is_torch(x: Any) -> bool:
    torch = _tensor_module()
    return torch is not None and isinstance(x, torch.Tensor)


def _stack(xs: list, like: Any) -> Any:
    return _tensor_module().stack(xs, dim=-1) if _is_torch(like) else np.stack(xs, axis=-1)


def _max(a: Any, b: Any) -> Any:
    return _tensor_module().maximum(a, b) if _is_torch(a) else np.maximum(a, b)


def _min(a: Any, b: Any) -> Any:
    return _tensor_module().minimum(a, b) if _is_torch(a) else np.minimum(a, b)


def _clip0(a: Any) -> Any:
    return a.clamp(min=0) if _is_torch(a) else np.clip(a, 0, None)


def _div(a: Any, b: Any) -> Any:
    """a / b with the denominator floored at a tiny value (keeps scale invariance, avoids 0/0)."""
    return a / (b.clamp(min=1e-12) if _is_torch(b) else np.clip(b, 1e-12, None))


def _log(a: Any) -> Any:
    return _tensor_module().log(a) if _is_torch(a) else np.log(a)


def _sqrt(a: Any) -> Any:
    return _tensor_module().sqrt(a) if _is_torch(a) else np.sqrt(a)


def _coords(b: Any) -> tuple[Any, Any, Any, Any]:
    return b[..., 0], b[..., 1], b[..., 2], b[..., 3]


def widths(b: Any) -> Any:
    return b[..., 2] - b[..., 0]


def heights(b: Any) -> Any:
    return b[..., 3] - b[..., 1]


def area(b: Any) -> Any:
    return _clip0(widths(b)) * _clip0(heights(b))


def centres(b: Any) -> Any:
    """``(..., 2)`` box centres (cx, cy)."""
    return _stack([(b[..., 0] + b[..., 2]) * 0.5, (b[..., 1] + b[..., 3]) * 0.5], b)


def diag(b: Any) -> Any:
    return _sqrt(widths(b) ** 2 + heights(b) ** 2)


def intersection_box(a: Any, b: Any) -> Any:
    """Intersection box; may be inverted (x2 < x1) when the boxes are disjoint."""
    ax1, ay1, ax2, ay2 = _coords(a)
    bx1, by1, bx2, by2 = _coords(b)
    return _stack([_max(ax1, bx1), _max(ay1, by1), _min(ax2, bx2), _min(ay2, by2)], a if _is_torch(a) else ax1)


def intersection_area(a: Any, b: Any) -> Any:
    return area(intersection_box(a, b))


def iou(a: Any, b: Any) -> Any:
    inter = intersection_area(a, b)
    return _div(inter, area(a) + area(b) - inter)


def union_box(a: Any, b: Any) -> Any:
    """The smallest box covering both."""
    ax1, ay1, ax2, ay2 = _coords(a)
    bx1, by1, bx2, by2 = _coords(b)
    return _stack([_min(ax1, bx1), _min(ay1, by1), _max(ax2, bx2), _max(ay2, by2)], a if _is_torch(a) else ax1)


def contact_box(a: Any, b: Any) -> Any:
    """The contact region: the intersection when the boxes overlap, otherwise the gap between them.

    Per axis, overlapping extents give the shared interval and separated extents the interval
    between the facing edges, so the result is always a valid (possibly zero-width) box.
    """
    ax1, ay1, ax2, ay2 = _coords(a)
    bx1, by1, bx2, by2 = _coords(b)
    lo_x, hi_x = _max(ax1, bx1), _min(ax2, bx2)
    lo_y, hi_y = _max(ay1, by1), _min(ay2, by2)
    return _stack([_min(lo_x, hi_x), _min(lo_y, hi_y), _max(lo_x, hi_x), _max(lo_y, hi_y)], a if _is_torch(a) else ax1)


def _axis_gaps(a: Any, b: Any) -> tuple[Any, Any]:
    """Signed gaps per axis: positive = separated by that much, negative = overlapping extent."""
    ax1, ay1, ax2, ay2 = _coords(a)
    bx1, by1, bx2, by2 = _coords(b)
    return _max(bx1 - ax2, ax1 - bx2), _max(by1 - ay2, ay1 - by2)


def gap(a: Any, b: Any) -> Any:
    """Euclidean distance between the two boxes (0 when they touch or overlap)."""
    gx, gy = _axis_gaps(a, b)
    return _sqrt(_clip0(gx) ** 2 + _clip0(gy) ** 2)


def touch(a: Any, b: Any, tol: float = 0.0) -> Any:
    """True where the boxes overlap or their gap is at most ``tol`` pixels."""
    return gap(a, b) <= tol


def containment(a: Any, b: Any) -> Any:
    """Fraction of ``a``'s area that lies inside ``b`` (|a ∩ b| / |a|)."""
    return _div(intersection_area(a, b), area(a))


def pair_features(subj: Any, obj: Any) -> Any:
    """The 19 scale-invariant geometry features g_ij of an ordered (subject, object) pair.

    Fifteen box features (offsets, log size ratios, overlaps, signed gaps, aspects, shares of
    the union) followed by four mask slots that are constant for boxes. Invariant to translating
    or uniformly scaling the image; swapping subject and object negates the offsets and log
    ratios and exchanges the per-box terms.
    """
    ws, hs = _max(widths(subj), _EPS + 0 * widths(subj)), _max(heights(subj), _EPS + 0 * heights(subj))
    wo, ho = _max(widths(obj), _EPS + 0 * widths(obj)), _max(heights(obj), _EPS + 0 * heights(obj))
    cs, co = centres(subj), centres(obj)
    dx, dy = co[..., 0] - cs[..., 0], co[..., 1] - cs[..., 1]
    u = union_box(subj, obj)
    uw, uh = widths(u) + _EPS, heights(u) + _EPS
    inter = intersection_area(subj, obj)
    a_s, a_o, a_u = ws * hs, wo * ho, uw * uh
    gx, gy = _axis_gaps(subj, obj)
    one = 1.0 + 0 * dx
    feats = [
        dx / ws, dy / hs, _log(wo / ws), _log(ho / hs), _div(inter, a_s + a_o - inter),
        inter / a_s, inter / a_o, dx / uw, dy / uh, gx / uw, gy / uh,
        _log(ws / hs), _log(wo / ho), a_s / a_u, a_o / a_u,
        one, one, 0 * one, 0 * one,
    ]
    return _stack(feats, dx)


def mask_features(mask_s: np.ndarray, mask_o: np.ndarray, box_s: np.ndarray, box_o: np.ndarray) -> np.ndarray:
    """The four mask slots for one pair of boolean masks (H, W) and their boxes."""
    ms, mo = mask_s.astype(bool), mask_o.astype(bool)
    a_s, a_o = ms.sum(), mo.sum()
    inter = np.logical_and(ms, mo).sum()
    union = a_s + a_o - inter
    box_iou = float(iou(box_s, box_o))
    box_cover = float(containment(box_s, box_o))
    return np.array([
        a_s / max(float(area(box_s)), _EPS), a_o / max(float(area(box_o)), _EPS),
        (inter / max(union, 1)) - box_iou, (inter / max(a_s, 1)) - box_cover,
    ], dtype=np.float32)
