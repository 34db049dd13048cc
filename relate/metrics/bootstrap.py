"""Percentile bootstrap over images for a recall cell's R@K and mR@K, and the paired bootstrap of
the difference between two systems on the same images (issue 15, deliverable 5).

Images are the unit resampled: each of ``B`` resamples draws the cell's images with replacement,
held as a (B, n_images) count matrix ``w`` so every statistic is one matrix product. Under ``w``:

* R@K  = ``w @ recall / n`` (the mean of the drawn images' recall);
* mR@K = per predicate, ``(w @ hits/n_gt) / (w @ present)`` over the drawn images that hold it,
  then the mean over the predicates present in that resample (as :func:`aggregate_per_image`).

The paired bootstrap applies the same ``w`` to both systems after joining their rows on image_id,
so image difficulty cancels in the difference. numpy only: no scipy or torch at import.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

__all__ = ["CellRows", "Interval", "Difference", "CellBootstrap", "PairedBootstrap", "cell_rows",
           "align_cells", "resample_weights", "bootstrap_cell", "paired_bootstrap", "bootstrap_p_value",
           "format_p", "adjust_p_bh"]


@dataclass(frozen=True)
class CellRows:
    """One cell's per-image rows at one K as arrays; row i of every array is ``image_ids[i]``."""

    image_ids: np.ndarray  # (n,) str
    recall: np.ndarray  # (n,) hits / n_gt
    terms: np.ndarray  # (n, P) per-predicate hits / n_gt, 0 where absent
    present: np.ndarray  # (n, P) bool: the image holds that predicate in its GT
    predicates: tuple[str, ...]

    @property
    def n_images(self) -> int:
        return int(self.image_ids.size)

    def take(self, idx: np.ndarray) -> "CellRows":
        return CellRows(self.image_ids[idx], self.recall[idx], self.terms[idx], self.present[idx], self.predicates)


@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float


@dataclass(frozen=True)
class Difference:
    """a - b with its percentile interval and a two-sided bootstrap p-value
    (:func:`bootstrap_p_value`; ``p_bound``: no resample crossed zero, so p is below ``p_value``)."""

    estimate: float
    low: float
    high: float
    p_value: float
    p_bound: bool = False

    @property
    def p_text(self) -> str:
        return format_p(self.p_value, self.p_bound)

    @property
    def significant(self) -> bool:
        """The interval excludes zero."""
        return self.low > 0 or self.high < 0


@dataclass(frozen=True)
class CellBootstrap:
    recall: Interval
    mean_recall: Interval
    n_images: int


@dataclass(frozen=True)
class PairedBootstrap:
    recall: Difference
    mean_recall: Difference
    n_images: int


def cell_rows(rows: Sequence[dict], k: int) -> CellRows:
    """Arrays from the per-image rows (PER_IMAGE_SCHEMA dicts) of one cell at ``k``; an image
    listed twice is an error, since it would be double-weighted in every mean."""
    sel = [r for r in rows if int(r["k"]) == k]
    ids = np.array([str(r["image_id"]) for r in sel], dtype=object)
    if np.unique(ids).size != ids.size:
        raise ValueError(f"per-image rows at K={k} list an image more than once")
    preds = tuple(sorted({t["predicate"] for r in sel for t in r["predicates"]}))
    col = {p: j for j, p in enumerate(preds)}
    terms = np.zeros((len(sel), len(preds)))
    present = np.zeros((len(sel), len(preds)), dtype=bool)
    for i, r in enumerate(sel):
        for t in r["predicates"]:
            terms[i, col[t["predicate"]]] = t["hits"] / t["n_gt"]
            present[i, col[t["predicate"]]] = True
    recall = np.array([float(r["recall"]) for r in sel])
    return CellRows(ids, recall, terms, present, preds)


def align_cells(a: CellRows, b: CellRows) -> tuple[CellRows, CellRows]:
    """Both cells restricted to their shared image_ids, in one order (the pairing)."""
    shared, ia, ib = np.intersect1d(a.image_ids.astype(str), b.image_ids.astype(str), return_indices=True)
    if shared.size == 0:
        raise ValueError("the two cells share no image_id, so they cannot be paired")
    return a.take(ia), b.take(ib)


def resample_weights(n: int, resamples: int, seed: int) -> np.ndarray:
    """(B, n) counts: how often each image is drawn in each resample of n draws with replacement."""
    if n < 1 or resamples < 1:
        raise ValueError(f"need n >= 1 images and resamples >= 1, got n={n}, resamples={resamples}")
    idx = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    flat = (np.arange(resamples)[:, None] * n + idx).ravel()
    return np.bincount(flat, minlength=resamples * n).reshape(resamples, n).astype(np.float64)


def _stats(cell: CellRows, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(R@K, mR@K) for each row of weights ``w`` (B, n)."""
    R = w @ cell.recall / w.sum(axis=1)
    num, den = w @ cell.terms, w @ cell.present.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        per_pred = np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)
    seen = (den > 0).sum(axis=1)
    mR = np.where(seen > 0, np.nansum(per_pred, axis=1) / np.maximum(seen, 1), np.nan)
    return R, mR


def _interval(point: float, draws: np.ndarray, confidence: float) -> Interval:
    a = 100 * (1 - confidence) / 2
    lo, hi = np.nanpercentile(draws, [a, 100 - a]) if np.isfinite(draws).any() else (np.nan, np.nan)
    return Interval(float(point), float(lo), float(hi))


def bootstrap_p_value(point: float, draws: np.ndarray) -> tuple[float, bool]:
    """Two-sided bootstrap p of a difference and whether it is only an upper bound.

    p is twice the share of the finite resampled differences that lie on the other side of zero
    from the point estimate (zero included), capped at 1. B resamples resolve that share only to
    1/B: when none crosses, the one-sided share is below 1/B, so the two-sided p is below 2/B, and
    that bound is returned with ``True``. A p of 0 is never reported; a zero or undefined point
    estimate gives (1, False)."""
    d = np.asarray(draws, dtype=np.float64)
    d = d[np.isfinite(d)]
    if not np.isfinite(point) or point == 0 or d.size == 0:
        return 1.0, False
    crossed = int(np.count_nonzero(d <= 0) if point > 0 else np.count_nonzero(d >= 0))
    if crossed == 0:
        return min(1.0, 2.0 / d.size), True
    return min(1.0, 2.0 * crossed / d.size), False


def format_p(p: float, bound: bool) -> str:
    """``0.034``, or ``< 0.002`` for a bound (the precision follows the bound: ``< 2e-05``)."""
    return f"< {p:.2g}" if bound else f"{p:.3f}"


def adjust_p_bh(p_values: Sequence[float]) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values (false discovery rate) of one family of tests, by
    scipy. A bound from :func:`bootstrap_p_value` enters as its bound, which only makes the
    adjusted values larger (conservative). NaN entries (no test) stay NaN."""
    from scipy.stats import false_discovery_control

    p = np.asarray(p_values, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    ok = np.isfinite(p)
    if ok.any():
        out[ok] = false_discovery_control(p[ok], method="bh")
    return out


def _difference(point: float, draws: np.ndarray, confidence: float) -> Difference:
    iv = _interval(point, draws, confidence)
    p, bound = bootstrap_p_value(point, draws)
    return Difference(iv.estimate, iv.low, iv.high, p, bound)


def bootstrap_cell(cell: CellRows, resamples: int = 1000, seed: int = 0,
                   confidence: float = 0.95) -> CellBootstrap:
    """Point R@K and mR@K of the cell with percentile intervals from resampling its images."""
    ones = np.ones((1, cell.n_images))
    (R0,), (mR0,) = _stats(cell, ones)
    R, mR = _stats(cell, resample_weights(cell.n_images, resamples, seed))
    return CellBootstrap(_interval(R0, R, confidence), _interval(mR0, mR, confidence), cell.n_images)


def paired_bootstrap(a: CellRows, b: CellRows, resamples: int = 1000, seed: int = 0,
                     confidence: float = 0.95) -> PairedBootstrap:
    """a - b for R@K and mR@K on the images both cells hold, one set of resamples for both."""
    a, b = align_cells(a, b)
    ones = np.ones((1, a.n_images))
    (Ra0,), (mRa0,) = _stats(a, ones)
    (Rb0,), (mRb0,) = _stats(b, ones)
    w = resample_weights(a.n_images, resamples, seed)
    Ra, mRa = _stats(a, w)
    Rb, mRb = _stats(b, w)
    return PairedBootstrap(_difference(Ra0 - Rb0, Ra - Rb, confidence),
                           _difference(mRa0 - mRb0, mRa - mRb, confidence), a.n_images)
