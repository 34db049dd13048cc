"""A3: the full vocabulary deployed, synonym-tolerant matching, MRR and median rank (6.3, Tab. 6).

A predicted string counts for a GT string when they are equal or their embeddings' cosine
reaches a threshold. The threshold belongs to one embedding space: it is calibrated on labelled
synonym / non-synonym pairs embedded in that space, and a matcher refuses to be used with a
different space (a threshold fitted in one space accepted 0.6% of true synonyms in another, H.4).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import Callable, Mapping, Sequence

import numpy as np

from relate.metrics._tables import GroundTruth, Predictions, expand_join
from relate.metrics.recall import evaluate_recall

__all__ = ["SynonymMatcher", "labelled_string_pairs", "calibrate_synonym_threshold",
           "rank_of_truth", "evaluate_open_vocab"]

Embed = Callable[[Sequence[str]], np.ndarray]


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


@dataclass(frozen=True)
class SynonymMatcher:
    """Cosine threshold for one embedding space, named so a mismatch is caught."""

    threshold: float
    space: str

    def match_matrix(self, embed: Embed, pred_vocab: Sequence[str], gt_vocab: Sequence[str], *,
                     space: str) -> np.ndarray:
        """Boolean [len(pred_vocab), len(gt_vocab)]: equal strings or cosine >= threshold."""
        if space != self.space:
            raise ValueError(f"synonym threshold was calibrated in space {self.space!r}, "
                             f"cannot be used with {space!r}; calibrate it there")
        if not np.isfinite(self.threshold):
            raise ValueError(f"synonym threshold for {self.space!r} is not calibrated (NaN)")
        a, b = _unit(embed(list(pred_vocab))), _unit(embed(list(gt_vocab)))
        eq = np.asarray(pred_vocab, dtype=object)[:, None] == np.asarray(gt_vocab, dtype=object)[None, :]
        return eq | (a @ b.T >= self.threshold)


def labelled_string_pairs(groups: Mapping[str, Sequence[str]], *, max_negatives: int = 200_000,
                          seed: int = 0) -> tuple[list[str], list[str], np.ndarray]:
    """Every within-group pair (synonyms, label 1) and cross-group pairs (label 0): all of them
    for small vocabularies, a uniform sample of ``max_negatives`` for large ones (a 19k-string
    vocabulary has ~2e8 cross pairs; the threshold needs their distribution, not all of them)."""
    strings = [s for forms in groups.values() for s in forms]
    gid = np.concatenate([np.full(len(f), k) for k, f in enumerate(groups.values())]) if strings else np.zeros(0, int)
    a, b = [], []
    for k in np.unique(gid):
        idx = np.flatnonzero(gid == k)
        for i, j in combinations(idx.tolist(), 2):
            a.append(i)
            b.append(j)
    n = len(strings)
    n_cross = (n * (n - 1) // 2) - len(a)
    if n_cross <= max_negatives:
        ii, jj = np.triu_indices(n, 1)
        cross = gid[ii] != gid[jj]
        na, nb = ii[cross], jj[cross]
    else:
        rng = np.random.default_rng(seed)
        na, nb = rng.integers(0, n, 2 * max_negatives), rng.integers(0, n, 2 * max_negatives)
        keep = gid[na] != gid[nb]
        na, nb = na[keep][:max_negatives], nb[keep][:max_negatives]
    left = [strings[i] for i in a] + [strings[i] for i in na]
    right = [strings[j] for j in b] + [strings[j] for j in nb]
    y = np.r_[np.ones(len(a), bool), np.zeros(len(na), bool)]
    return left, right, y


def calibrate_synonym_threshold(embed: Embed, groups: Mapping[str, Sequence[str]], *, space: str) -> SynonymMatcher:
    """Threshold maximising Youden's J (TPR - FPR) on labelled pairs embedded in ``space``."""
    a, b, y = labelled_string_pairs(groups)
    if y.all() or not y.any():
        raise ValueError("calibration needs both synonym and non-synonym pairs (two groups or more)")
    uniq = sorted(set(a) | set(b))
    emb = dict(zip(uniq, _unit(embed(uniq))))  # embed each string once
    cos = np.array([float(emb[x] @ emb[z]) for x, z in zip(a, b)])
    from sklearn.metrics import roc_curve  # ~1.5 s: only where a threshold is calibrated

    fpr, tpr, thr = roc_curve(y, cos)
    j = tpr - fpr
    best = int(np.argmax(j[1:]) + 1)  # thr[0] is +inf by convention
    return SynonymMatcher(float(thr[best]), space)


def rank_of_truth(gt: GroundTruth, preds: Predictions, predicate_match: np.ndarray | None = None) -> np.ndarray:
    """1-based rank of the first matching string among the pair's scored predicates; inf if none."""
    B = max(gt.max_boxes, int(max(preds.subject.max(initial=0), preds.object.max(initial=0))) + 1, 1)
    pkey = (preds.image * B + preds.subject) * B + preds.object
    order = np.lexsort((-preds.score, pkey))
    pk = pkey[order]
    start = np.ones(pk.size, bool)
    start[1:] = pk[1:] != pk[:-1]
    pos = np.arange(pk.size) - np.maximum.accumulate(np.where(start, np.arange(pk.size), 0))
    gkey = (gt.rel_image * B + gt.rel_subject) * B + gt.rel_object
    gi, pj = expand_join(gkey, pk)
    pp, gp = preds.predicate[order[pj]], gt.rel_predicate[gi]
    ok = predicate_match[pp, gp] if predicate_match is not None else pp == gp
    rank = np.full(gkey.size, np.inf)
    np.minimum.at(rank, gi[ok], pos[pj[ok]].astype(np.float64) + 1)
    return rank


def evaluate_open_vocab(gt: GroundTruth, preds: Predictions, predicate_match: np.ndarray, *,
                        ks: Sequence[int] = (20, 50, 100), vocabulary_size: int | None = None,
                        graph_constrained: bool = True, per_image: bool = False) -> dict:
    """Synonym-tolerant recall (graph-constrained by default), MRR and median rank of the exact
    GT string. An unranked GT string takes rank ``vocabulary_size`` (the worst possible).
    ``per_image`` adds the synonym-tolerant per-image recall rows under ``"per_image"``."""
    rec = evaluate_recall(gt, preds, ks=ks, graph_constrained=graph_constrained, predicate_match=predicate_match,
                          per_image=per_image)
    rank = rank_of_truth(gt, preds)
    worst = float(vocabulary_size or preds.vocab.size)
    rank_w = np.where(np.isfinite(rank), np.minimum(rank, worst), worst)
    out = rec.to_dict()
    out["metrics"]["MRR"] = float(np.where(np.isfinite(rank), 1.0 / rank, 0.0).mean()) if rank.size else float("nan")
    out["metrics"]["median_rank"] = float(np.median(rank_w)) if rank.size else float("nan")
    out["metrics"]["vocabulary_size"] = worst
    if per_image:
        out["per_image"] = [{**r, "matcher": "synonym"} for r in rec.per_image]
    return out
