"""Table 16 of seed 001 (B.2) as one function: the geometry of a predicate text space.

syn / inv cos are mean cosines over synonym and inverse pairs; AUC separates the two
populations (synonyms should score higher); NN1 in group is the share of grouped predicates
whose nearest neighbour lies in their own group; effective dimension is the participation
ratio of the covariance spectrum; hubness is the skew of the 10-NN in-degree distribution.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import numpy as np

from relate.text.bank import TextBank

__all__ = ["geometry_report", "render_markdown", "participation_ratio", "knn_indices", "group_lists"]

_COLUMNS = [("dim", "dim", "{:d}"), ("syn_cos", "syn cos", "{:.2f}"), ("inv_cos", "inv cos", "{:.2f}"),
            ("auc_syn_inv", "AUC syn/inv", "{:.3f}"), ("nn1_in_group", "NN1 in group", "{:.2f}"),
            ("eff_dim", "eff. dim", "{:.1f}"), ("hubness", "hubness", "{:.2f}"),
            ("n_syn_pairs", "syn pairs", "{:d}"), ("n_inv_pairs", "inv pairs", "{:d}")]


def group_lists(groups) -> list[list[str]]:
    """Accept a mapping name -> SynonymGroup / list of forms, or an iterable of string lists."""
    values = groups.values() if isinstance(groups, Mapping) else groups
    out = []
    for g in values:
        forms = getattr(g, "forms", g)
        if isinstance(forms, str):
            raise TypeError(f"a synonym group must be a collection of strings, got the string {forms!r}")
        out.append([str(f) for f in forms])
    return out


def participation_ratio(matrix: np.ndarray) -> float:
    """(sum lambda)^2 / sum lambda^2 over the covariance eigenvalues of the rows."""
    x = np.asarray(matrix, dtype=np.float64)
    x = x - x.mean(0, keepdims=True)
    # Singular values of the centred data give the covariance spectrum without a D x D solve.
    lam = np.linalg.svd(x, compute_uv=False) ** 2
    return float(lam.sum() ** 2 / max((lam ** 2).sum(), 1e-30))


def knn_indices(matrix: np.ndarray, k: int, chunk: int = 2048) -> np.ndarray:
    """Indices of each row's k nearest other rows by cosine (rows are unit vectors), ``[V, k]``."""
    m = np.asarray(matrix, dtype=np.float32)
    n = m.shape[0]
    k = min(k, n - 1)
    out = np.empty((n, k), dtype=np.int64)
    for start in range(0, n, chunk):
        sims = m[start:start + chunk] @ m.T
        rows = np.arange(sims.shape[0])
        sims[rows, start + rows] = -np.inf  # a string is not its own neighbour
        part = np.argpartition(-sims, k - 1, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(sims, part, 1), axis=1, kind="stable")
        out[start:start + chunk] = np.take_along_axis(part, order, 1)
    return out


def _pair_cosines(bank: TextBank, pairs: Iterable[tuple[str, str]]) -> np.ndarray:
    idx = [(bank.index(a), bank.index(b)) for a, b in pairs]
    if not idx:
        return np.zeros(0, dtype=np.float64)
    ia, ib = np.asarray(idx).T
    return np.einsum("ij,ij->i", bank.matrix[ia], bank.matrix[ib]).astype(np.float64)


def geometry_report(bank: TextBank, groups, inverse_pairs: Sequence[tuple[str, str]], k: int = 10) -> dict:
    """The Table 16 row for ``bank``: pairs with a string outside the bank are skipped (counted)."""
    present = set(bank.strings)
    lists = [[f for f in g if f in present] for g in group_lists(groups)]
    syn = [(g[i], g[j]) for g in lists for i in range(len(g)) for j in range(i + 1, len(g))]
    inv = [(a, b) for a, b in inverse_pairs if a in present and b in present]
    if not syn or not inv:
        raise ValueError(f"geometry_report needs synonym and inverse pairs inside the bank; found "
                         f"{len(syn)} synonym and {len(inv)} inverse pairs among {len(bank)} strings")
    syn_cos, inv_cos = _pair_cosines(bank, syn), _pair_cosines(bank, inv)
    labels = np.r_[np.ones(len(syn_cos)), np.zeros(len(inv_cos))]
    from sklearn.metrics import roc_auc_score  # here, not at import: loading a checkpoint imports relate.text

    auc = roc_auc_score(labels, np.r_[syn_cos, inv_cos])

    nn = knn_indices(bank.matrix, k)
    group_id = np.full(len(bank), -1)
    for gi, g in enumerate(lists):
        if len(g) >= 2:  # NN1 in group is only defined where the group has another member
            group_id[[bank.index(f) for f in g]] = gi
    grouped = group_id >= 0
    nn1 = float((group_id[nn[grouped, 0]] == group_id[grouped]).mean())
    in_degree = np.bincount(nn.ravel(), minlength=len(bank)).astype(np.float64)
    from scipy.stats import skew

    # A flat in-degree (tiny banks) has no skew; scipy would warn and return noise.
    hub = float(skew(in_degree)) if in_degree.std() > 1e-9 * max(1.0, in_degree.mean()) else 0.0
    return {"encoder": bank.encoder, "dim": bank.dim, "n_strings": len(bank),
            "n_syn_pairs": len(syn), "n_inv_pairs": len(inv),
            "syn_cos": float(syn_cos.mean()), "inv_cos": float(inv_cos.mean()), "auc_syn_inv": float(auc),
            "nn1_in_group": nn1, "eff_dim": participation_ratio(bank.matrix),
            "hubness": hub}


def render_markdown(rows: Sequence[tuple[str, dict]]) -> str:
    """A markdown table with one ``(label, geometry_report(...))`` per row."""
    head = "| encoder | " + " | ".join(title for _, title, _ in _COLUMNS) + " |"
    sep = "|---|" + "---:|" * len(_COLUMNS)
    lines = [head, sep]
    for label, rep in rows:
        cells = [fmt.format(int(rep[key]) if fmt == "{:d}" else rep[key]) for key, _, fmt in _COLUMNS]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
