"""The triplet probe's readout and accuracies (seed 000, Sec. 3.5).

A triplet is correct when cos(query, target) > cos(query, distractor). Every triplet carries one
label on each of two orthogonal axes: relation type (CR taxonomic / TR thematic) and distractor
type (CD colour-matched / SD shape-matched), so overall accuracy is the count-weighted mean of
the CR and TR accuracies and, equally, of the CD and SD accuracies.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np

__all__ = [
    "RELATION_TYPES", "DISTRACTOR_TYPES", "AxisScores", "cosine_correct", "score_triplets",
    "check_axis_labels", "accuracy_matrix",
]

RELATION_TYPES = ("CR", "TR")
DISTRACTOR_TYPES = ("CD", "SD")


def cosine_correct(f_query: np.ndarray, f_target: np.ndarray, f_distractor: np.ndarray) -> np.ndarray:
    """Per-triplet correctness of the cosine readout; a tie counts as wrong (no credit for
    features that cannot tell the two apart, e.g. a constant representation)."""
    q, t, d = (np.asarray(a, dtype=np.float64) for a in (f_query, f_target, f_distractor))
    if not (q.shape == t.shape == d.shape) or q.ndim != 2:
        raise ValueError(f"feature arrays must share one [N, D] shape, got {q.shape}, {t.shape}, {d.shape}")
    eps = 1e-12
    qn = q / np.maximum(np.linalg.norm(q, axis=1, keepdims=True), eps)
    tn = t / np.maximum(np.linalg.norm(t, axis=1, keepdims=True), eps)
    dn = d / np.maximum(np.linalg.norm(d, axis=1, keepdims=True), eps)
    return np.einsum("nd,nd->n", qn, tn) > np.einsum("nd,nd->n", qn, dn)


def check_axis_labels(relation: Sequence[str], distractor: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Validate the two label columns and return them as arrays."""
    rel = np.asarray(relation, dtype=object)
    dis = np.asarray(distractor, dtype=object)
    if rel.shape != dis.shape or rel.ndim != 1:
        raise ValueError(f"relation and distractor labels differ in shape: {rel.shape} vs {dis.shape}")
    for name, arr, valid in (("relation_type", rel, RELATION_TYPES), ("distractor_type", dis, DISTRACTOR_TYPES)):
        bad = sorted({str(v) for v in arr if v not in valid})
        if bad:
            raise ValueError(f"{name}: unknown labels {bad}; valid labels are {list(valid)}")
    return rel, dis


@dataclass(frozen=True)
class AxisScores:
    """Accuracies as fractions in [0, 1] (NaN for an empty cell) and gaps in fractions."""

    overall: float
    CR: float
    TR: float
    CD: float
    SD: float
    gap_cr_tr: float  # Delta CR-TR > 0: taxonomic relations are easier than thematic ones
    gap_cd_sd: float  # Delta CD-SD > 0: shape-matched distractors mislead more than colour ones
    n: int
    n_CR: int
    n_TR: int
    n_CD: int
    n_SD: int

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def _mean(x: np.ndarray) -> float:
    return float(x.mean()) if x.size else float("nan")


def score_triplets(correct: Sequence[bool], relation: Sequence[str], distractor: Sequence[str]) -> AxisScores:
    """Overall and per-axis accuracy plus both gap metrics for one model."""
    c = np.asarray(correct, dtype=bool)
    rel, dis = check_axis_labels(relation, distractor)
    if c.shape != rel.shape:
        raise ValueError(f"{c.shape[0]} correctness values for {rel.shape[0]} triplets")
    if c.size == 0:
        raise ValueError("no triplets to score")
    cells = {k: c[rel == k] for k in RELATION_TYPES} | {k: c[dis == k] for k in DISTRACTOR_TYPES}
    acc = {k: _mean(v) for k, v in cells.items()}
    return AxisScores(
        overall=_mean(c), **acc,
        gap_cr_tr=acc["CR"] - acc["TR"], gap_cd_sd=acc["CD"] - acc["SD"],
        n=int(c.size), **{f"n_{k}": int(v.size) for k, v in cells.items()},
    )


def accuracy_matrix(weights: np.ndarray, correct: np.ndarray, rel: np.ndarray, dis: np.ndarray) -> dict[str, np.ndarray]:
    """Accuracies under many resamples at once: ``weights`` [B, N] counts how often each triplet
    was drawn in each resample (the bootstrap's workhorse; rows with an empty cell give NaN)."""
    c = correct.astype(np.float64)
    out: dict[str, np.ndarray] = {}
    masks = {"overall": np.ones_like(c, dtype=bool)}
    masks |= {k: rel == k for k in RELATION_TYPES} | {k: dis == k for k in DISTRACTOR_TYPES}
    with np.errstate(invalid="ignore", divide="ignore"):
        for k, m in masks.items():
            w = weights[:, m]
            out[k] = (w @ c[m]) / w.sum(axis=1)
    out["gap_cr_tr"] = out["CR"] - out["TR"]
    out["gap_cd_sd"] = out["CD"] - out["SD"]
    return out
