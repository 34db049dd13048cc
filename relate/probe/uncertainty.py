"""What seed 000 leaves out (Sec. 6, limitations): bootstrap intervals and paired model tests.

Intervals resample triplets within each (relation, distractor) cell, because the cell sizes are
fixed by the benchmark's design (POPORO: CR 215 / TR 185, CD 170 / SD 230), not sampled. Paired
tests compare two models on the same triplets: McNemar's exact test on the discordant triplets,
and a sign-flip permutation test on the per-triplet differences.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np
from scipy.stats import binomtest

from relate.probe.metrics import accuracy_matrix, check_axis_labels

__all__ = ["Interval", "bootstrap_intervals", "PairedTest", "paired_test", "mcnemar_exact", "permutation_pvalue"]

METRICS = ("overall", "CR", "TR", "CD", "SD", "gap_cr_tr", "gap_cd_sd")


@dataclass(frozen=True)
class Interval:
    low: float
    high: float

    def to_list(self) -> list[float]:
        return [self.low, self.high]


def _resample_weights(cells: np.ndarray, n_boot: int, rng: np.random.Generator, stratified: bool) -> np.ndarray:
    """[n_boot, N] draw counts; within-cell draws keep every cell's size fixed."""
    n = cells.size
    w = np.zeros((n_boot, n), dtype=np.float64)
    groups = [np.flatnonzero(cells == g) for g in np.unique(cells)] if stratified else [np.arange(n)]
    rows = np.arange(n_boot)[:, None]
    for idx in groups:
        draws = idx[rng.integers(0, idx.size, size=(n_boot, idx.size))]
        np.add.at(w, (np.broadcast_to(rows, draws.shape), draws), 1.0)
    return w


def bootstrap_intervals(
    correct: Sequence[bool], relation: Sequence[str], distractor: Sequence[str], *,
    n_boot: int = 2000, level: float = 0.95, seed: int = 0, stratified: bool = True,
    chunk: int = 500,
) -> dict[str, Interval]:
    """Percentile intervals for overall, CR, TR, CD, SD and both gaps (fractions)."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if n_boot < 10:
        raise ValueError(f"n_boot must be at least 10, got {n_boot}")
    c = np.asarray(correct, dtype=bool)
    rel, dis = check_axis_labels(relation, distractor)
    if c.shape != rel.shape:
        raise ValueError(f"{c.shape[0]} correctness values for {rel.shape[0]} triplets")
    cells = np.array([f"{r}/{d}" for r, d in zip(rel, dis)])
    rng = np.random.default_rng(seed)
    samples: dict[str, list[np.ndarray]] = {k: [] for k in METRICS}
    for start in range(0, n_boot, chunk):  # bounded memory for large sets
        w = _resample_weights(cells, min(chunk, n_boot - start), rng, stratified)
        for k, v in accuracy_matrix(w, c, rel, dis).items():
            samples[k].append(v)
    alpha = (1.0 - level) / 2.0
    out = {}
    for k, parts in samples.items():
        v = np.concatenate(parts)
        v = v[~np.isnan(v)]
        lo, hi = (np.quantile(v, [alpha, 1.0 - alpha]) if v.size else (np.nan, np.nan))
        out[k] = Interval(float(lo), float(hi))
    return out


def mcnemar_exact(correct_a: np.ndarray, correct_b: np.ndarray) -> tuple[int, int, float]:
    """(a-only correct, b-only correct, two-sided exact p) over the discordant triplets."""
    a_only = int(np.sum(correct_a & ~correct_b))
    b_only = int(np.sum(~correct_a & correct_b))
    n = a_only + b_only
    p = 1.0 if n == 0 else float(binomtest(a_only, n, 0.5, alternative="two-sided").pvalue)
    return a_only, b_only, p


def permutation_pvalue(correct_a: np.ndarray, correct_b: np.ndarray, n_perm: int = 10000, seed: int = 0) -> float:
    """Two-sided sign-flip test of the mean per-triplet accuracy difference (add-one estimate)."""
    d = correct_a.astype(np.float64) - correct_b.astype(np.float64)
    nz = d[d != 0]  # concordant triplets contribute 0 under every flip
    if nz.size == 0:
        return 1.0
    observed = abs(nz.sum())
    rng = np.random.default_rng(seed)
    hits = 0
    for start in range(0, n_perm, 1000):
        m = min(1000, n_perm - start)
        signs = rng.integers(0, 2, size=(m, nz.size)) * 2 - 1
        hits += int(np.sum(np.abs(signs @ nz) >= observed - 1e-9))
    return (hits + 1) / (n_perm + 1)


@dataclass(frozen=True)
class PairedTest:
    model_a: str
    model_b: str
    acc_a: float
    acc_b: float
    diff: float  # acc_a - acc_b
    a_only: int
    b_only: int
    p_mcnemar: float
    p_permutation: float

    def to_dict(self) -> dict[str, float | str | int]:
        return asdict(self)


def paired_test(name_a: str, correct_a: Sequence[bool], name_b: str, correct_b: Sequence[bool],
                *, n_perm: int = 10000, seed: int = 0) -> PairedTest:
    """Both paired tests for two models scored on the same triplets."""
    a = np.asarray(correct_a, dtype=bool)
    b = np.asarray(correct_b, dtype=bool)
    if a.shape != b.shape:
        raise ValueError(f"{name_a} and {name_b} were scored on different triplet counts: {a.shape} vs {b.shape}")
    a_only, b_only, p_mc = mcnemar_exact(a, b)
    return PairedTest(name_a, name_b, float(a.mean()), float(b.mean()), float(a.mean() - b.mean()),
                      a_only, b_only, p_mc, permutation_pvalue(a, b, n_perm, seed))
