"""Every headline of an OV-SGG-Bench cell under image resampling: the draws behind its interval
(issue 15, deliverable 5).

A bootstrap draw says how often each image of a benchmark is drawn; ``B`` draws are a (B, n)
count matrix ``W`` over the benchmark's images, in the ground truth's image order. Drawing one
``W`` per benchmark and applying it to every system scored there pairs the systems: image
difficulty cancels in their differences. Each kit holds what one statistic needs per image, so its
value under all ``B`` draws is a handful of array operations:

* :class:`RecallKit` (A1, A3, A4): per image its recall at K and, per predicate, hits / n_gt and
  n_gt. R@K, mR@K, F1@K and wR@K follow exactly as :func:`relate.metrics.recall.recall_from_hits`
  computes them (wR's log(N / n_c) weights from the drawn support).
* :class:`CeilingKit` (A4): per image its GT relations and those with both endpoints detected;
  the ceiling is a ratio of sums, so an image counts by its relations.
* :class:`LabelledKit` (A2, A6): labelled cells with their image, predicate, label and score.
  Average precision and ROC-AUC under weights follow scikit-learn's ``average_precision_score``
  and ``roc_auc_score`` with ``sample_weight`` (step-wise precision over distinct score
  thresholds; trapezoids over the ROC curve), vectorised over the draws; the tests check them
  against scikit-learn draw by draw.

numpy only: ``import relate.metrics`` stays free of torch and scikit-learn.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

__all__ = ["RecallKit", "CeilingKit", "LabelledKit", "recall_draws", "ceiling_draws", "ap_draws", "auc_draws",
           "prevalence_draws", "percentile_interval"]


@dataclass(frozen=True)
class RecallKit:
    """One recall cell at one K; row i is image ``image[i]`` (an index into the benchmark's images)."""

    image: np.ndarray    # (n,) int64
    recall: np.ndarray   # (n,) hits / n_gt of the image
    terms: np.ndarray    # (n, P) per-predicate hits / n_gt, 0 where the image lacks the predicate
    counts: np.ndarray   # (n, P) the image's GT triplets of each predicate
    predicates: tuple[str, ...]

    @classmethod
    def from_rows(cls, rows: Sequence[Mapping], index: Mapping[str, int], k: int) -> "RecallKit":
        """From per-image rows (PER_IMAGE_SCHEMA dicts; relate.metrics.per_image) at ``k``; ``index``
        maps image_id to its position among the benchmark's images."""
        sel = [r for r in rows if int(r["k"]) == k]
        preds = tuple(sorted({t["predicate"] for r in sel for t in r["predicates"]}))
        col = {p: j for j, p in enumerate(preds)}
        hits = np.zeros((len(sel), len(preds)))
        counts = np.zeros((len(sel), len(preds)))
        for i, r in enumerate(sel):
            for t in r["predicates"]:
                hits[i, col[t["predicate"]]] = t["hits"]
                counts[i, col[t["predicate"]]] = t["n_gt"]
        missing = [r["image_id"] for r in sel if r["image_id"] not in index]
        if missing:
            raise ValueError(f"per-image rows name images outside the benchmark: {missing[:5]}")
        image = np.array([index[r["image_id"]] for r in sel], dtype=np.int64)
        if np.unique(image).size != image.size:
            raise ValueError(f"per-image rows at K={k} list an image more than once")
        with np.errstate(invalid="ignore", divide="ignore"):
            terms = np.where(counts > 0, hits / np.where(counts > 0, counts, 1.0), 0.0)
        recall = np.array([float(r["recall"]) for r in sel])
        return cls(image, recall, terms, counts, preds)


@dataclass(frozen=True)
class CeilingKit:
    image: np.ndarray     # (n,) int64
    relations: np.ndarray  # (n,) GT relations of the image
    covered: np.ndarray    # (n,) of those, how many have both endpoints detected


@dataclass(frozen=True)
class LabelledKit:
    image: np.ndarray      # (m,) int64
    predicate: np.ndarray  # (m,) int64 code into ``predicates``
    label: np.ndarray      # (m,) bool
    score: np.ndarray      # (m,) float64
    predicates: tuple[str, ...]


def _rows(W: np.ndarray, image: np.ndarray) -> np.ndarray:
    if image.size and (image.min() < 0 or image.max() >= W.shape[1]):
        raise ValueError(f"kit images index up to {int(image.max())} but the draws cover {W.shape[1]} images")
    return W[:, image]


def recall_draws(kit: RecallKit, W: np.ndarray) -> dict[str, np.ndarray]:
    """R@K, mR@K, F1@K and wR@K of the cell under each draw (rows of ``W``), each shape (B,)."""
    w = _rows(W, kit.image)
    n = w.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        R = np.where(n > 0, w @ kit.recall / np.where(n > 0, n, 1.0), np.nan)
        den = w @ (kit.counts > 0).astype(np.float64)
        r_c = np.where(den > 0, (w @ kit.terms) / np.where(den > 0, den, 1.0), 0.0)
        present = den > 0
        n_present = present.sum(axis=1)
        mR = np.where(n_present > 0, (r_c * present).sum(axis=1) / np.maximum(n_present, 1), np.nan)
        F1 = np.where(R + mR > 0, 2 * R * mR / (R + mR), 0.0)
        support = w @ kit.counts
        total = support.sum(axis=1, keepdims=True)
        idf = np.where(present, np.log(np.maximum(total, 1) / np.maximum(support, 1)), 0.0)
        flat = idf.sum(axis=1) <= 0  # one predicate drawn: IDF weights vanish, uniform (as recall_from_hits)
        idf[flat] = present[flat].astype(np.float64)
        wR = np.where(n_present > 0, (idf * r_c).sum(axis=1) / np.where(n_present > 0, idf.sum(axis=1), 1.0), np.nan)
    return {"R": R, "mR": mR, "F1": np.where(np.isnan(R) | np.isnan(mR), np.nan, F1), "wR": wR}


def ceiling_draws(kit: CeilingKit, W: np.ndarray) -> np.ndarray:
    """Pair-recall ceiling under each draw: drawn covered relations over drawn relations."""
    w = _rows(W, kit.image)
    rel = w @ kit.relations.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(rel > 0, (w @ kit.covered.astype(np.float64)) / np.where(rel > 0, rel, 1.0), np.nan)


def _curve(kit: LabelledKit, W: np.ndarray, code: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Weighted true and false positives at each distinct score threshold (descending) of one
    predicate's cells, per draw: two (B, T) arrays."""
    sel = np.flatnonzero(kit.predicate == code)
    if sel.size == 0:
        return None
    order = sel[np.argsort(-kit.score[sel], kind="stable")]
    s, y = kit.score[order], kit.label[order].astype(np.float64)
    last = np.r_[s[1:] != s[:-1], True]  # the last cell of each group of tied scores
    w = _rows(W, kit.image[order])
    tp = np.cumsum(w * y, axis=1)[:, last]
    fp = np.cumsum(w * (1.0 - y), axis=1)[:, last]
    return tp, fp


def ap_draws(kit: LabelledKit, W: np.ndarray, codes: Sequence[int]) -> np.ndarray:
    """(B, len(codes)) average precision per predicate and draw: the sum over thresholds of the
    recall gained there times the precision there; NaN where a draw holds no positive of it."""
    def ap(tp: np.ndarray, fp: np.ndarray) -> np.ndarray:
        total = tp[:, -1:]
        gain = np.diff(np.concatenate([np.zeros_like(total), tp], axis=1), axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            precision = np.where(tp + fp > 0, tp / np.where(tp + fp > 0, tp + fp, 1.0), 0.0)
            return np.where(total[:, 0] > 0, (gain * precision).sum(axis=1) / np.where(total[:, 0] > 0, total[:, 0], 1.0),
                            np.nan)
    return _per_code(kit, W, codes, ap)


def auc_draws(kit: LabelledKit, W: np.ndarray, codes: Sequence[int]) -> np.ndarray:
    """(B, len(codes)) ROC-AUC per predicate and draw (trapezoids between thresholds, ties
    scoring one half); NaN where a draw lacks positives or negatives of it."""
    def auc(tp: np.ndarray, fp: np.ndarray) -> np.ndarray:
        zero = np.zeros((tp.shape[0], 1))
        tp0, fp0 = np.concatenate([zero, tp], axis=1), np.concatenate([zero, fp], axis=1)
        area = (np.diff(fp0, axis=1) * (tp0[:, 1:] + tp0[:, :-1]) / 2).sum(axis=1)
        den = tp[:, -1] * fp[:, -1]
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(den > 0, area / np.where(den > 0, den, 1.0), np.nan)
    return _per_code(kit, W, codes, auc)


def _per_code(kit: LabelledKit, W: np.ndarray, codes: Sequence[int],
              fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
    """(B, len(codes)): fn over each predicate's per-draw (tp, fp) curve; NaN where it has none."""
    out = np.full((W.shape[0], len(codes)), np.nan)
    for j, c in enumerate(codes):
        cur = _curve(kit, W, int(c))
        if cur is not None:
            out[:, j] = fn(*cur)
    return out


def prevalence_draws(kit: LabelledKit, W: np.ndarray) -> np.ndarray:
    """Share of positive cells under each draw (A2's chance level)."""
    w = _rows(W, kit.image)
    n = w.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, (w @ kit.label.astype(np.float64)) / np.where(n > 0, n, 1.0), np.nan)


def percentile_interval(draws: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """(low, high) percentiles of the finite draws; NaNs when none is finite."""
    d = np.asarray(draws, dtype=np.float64)
    d = d[np.isfinite(d)]
    if d.size == 0:
        return float("nan"), float("nan")
    a = 100 * (1 - confidence) / 2
    lo, hi = np.percentile(d, [a, 100 - a])
    return float(lo), float(hi)
