"""Per-edge top-1 accuracy on ground-truth pairs and the edge-by-edge join (seed 001, Tab. 1).

An edge is one annotated relation; it is correct when the system's best predicate for that
ordered pair is the annotated one. Micro accuracy averages over edges (and so rewards the
majority predicate of each category pair); macro accuracy averages per predicate first.
"""

from __future__ import annotations

import numpy as np

from relate.metrics._tables import GroundTruth, Predictions, expand_join
from relate.metrics.recall import rank_predictions

__all__ = ["edge_correct", "edge_accuracy", "edge_join"]


def edge_correct(gt: GroundTruth, preds: Predictions) -> np.ndarray:
    """Boolean per GT relation: the pair's top-1 predicted predicate equals the annotation."""
    idx, rank = rank_predictions(preds, graph_constrained=False)
    B = max(gt.max_boxes, int(max(preds.subject.max(initial=0), preds.object.max(initial=0))) + 1, 1)
    pkey = (preds.image[idx] * B + preds.subject[idx]) * B + preds.object[idx]
    order = np.lexsort((rank, pkey))
    pk = pkey[order]
    first = np.ones(pk.size, bool)
    first[1:] = pk[1:] != pk[:-1]
    best_key, best_pred = pk[first], preds.predicate[idx[order[first]]]
    gkey = (gt.rel_image * B + gt.rel_subject) * B + gt.rel_object
    gi, bj = expand_join(gkey, best_key)
    correct = np.zeros(gkey.size, bool)
    correct[gi] = best_pred[bj] == gt.rel_predicate[gi]
    return correct


def edge_accuracy(gt: GroundTruth, preds: Predictions) -> dict[str, float]:
    """Micro (per edge) and macro (per predicate) top-1 accuracy."""
    c = edge_correct(gt, preds).astype(np.float64)
    V = gt.predicates.size
    n = np.bincount(gt.rel_predicate, minlength=V)
    per = np.bincount(gt.rel_predicate, c, minlength=V)[n > 0] / n[n > 0]
    return {"micro": float(c.mean()) if c.size else float("nan"),
            "macro": float(per.mean()) if per.size else float("nan"), "n_edges": float(c.size)}


def edge_join(gt: GroundTruth, preds_a: Predictions, preds_b: Predictions) -> dict[str, float]:
    """Shares of edges only A gets right, only B, both, neither, and the oracle union."""
    a, b = edge_correct(gt, preds_a), edge_correct(gt, preds_b)
    n = max(a.size, 1)
    return {"only_a": float((a & ~b).sum() / n), "only_b": float((b & ~a).sum() / n),
            "both": float((a & b).sum() / n), "neither": float((~a & ~b).sum() / n),
            "union": float((a | b).sum() / n), "n_edges": float(a.size)}
