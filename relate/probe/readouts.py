"""Similarity readouts for the triplet probe: cosine (the paper's), Euclidean and rank-based.

Each readout scores sim(query, target) and sim(query, distractor) per triplet; the triplet is
correct when the target scores strictly higher (a tie counts as wrong, as in ``cosine_correct``).

* ``cosine``: the paper's readout (seed 000, Sec. 3.5); delegates to ``cosine_correct``.
* ``euclidean``: negative Euclidean distance on the raw (unnormalised) features, so feature
  norms matter here and not under cosine.
* ``spearman``: Spearman rank correlation between the two feature vectors (Pearson correlation
  of their within-vector ranks, ties given their average rank as ``scipy.stats.rankdata``), which
  is invariant to any monotone rescaling of the feature values.
"""

from __future__ import annotations

from typing import Literal, get_args

import numpy as np

from relate.probe.metrics import cosine_correct

__all__ = ["Similarity", "SIMILARITIES", "pair_similarity", "readout_correct"]

Similarity = Literal["cosine", "euclidean", "spearman"]
SIMILARITIES: tuple[str, ...] = get_args(Similarity)


def _rows(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    if a.ndim != 2:
        raise ValueError(f"features must be [N, D], got shape {a.shape}")
    return a


def _unit(a: np.ndarray) -> np.ndarray:
    return a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)


def pair_similarity(a: np.ndarray, b: np.ndarray, metric: Similarity) -> np.ndarray:
    """Row-wise similarity of two ``[N, D]`` arrays under ``metric`` (higher = more alike)."""
    a, b = _rows(a), _rows(b)
    if a.shape != b.shape:
        raise ValueError(f"feature arrays differ in shape: {a.shape} vs {b.shape}")
    if metric == "cosine":
        return np.einsum("nd,nd->n", _unit(a), _unit(b))
    if metric == "euclidean":
        return -np.linalg.norm(a - b, axis=1)
    if metric == "spearman":
        from scipy.stats import rankdata

        ra, rb = (rankdata(x, axis=1) for x in (a, b))
        ra, rb = ra - ra.mean(axis=1, keepdims=True), rb - rb.mean(axis=1, keepdims=True)
        # a constant vector has no ranks to correlate: similarity 0, so it never wins a triplet
        return np.einsum("nd,nd->n", _unit(ra), _unit(rb))
    raise ValueError(f"unknown similarity {metric!r}; valid: {list(SIMILARITIES)}")


def readout_correct(f_query: np.ndarray, f_target: np.ndarray, f_distractor: np.ndarray,
                    metric: Similarity = "cosine") -> np.ndarray:
    """Per-triplet correctness: sim(query, target) > sim(query, distractor) under ``metric``."""
    if metric == "cosine":  # exactly today's readout, bit for bit
        return cosine_correct(f_query, f_target, f_distractor)
    return pair_similarity(f_query, f_target, metric) > pair_similarity(f_query, f_distractor, metric)
