"""The prior-violation check of seed 001, H.3: how often a system asserts a contact predicate
(the paper's case: "wearing") between boxes that do not touch, against the same rate in its
training data. None of the recall axes can see this, because benchmarks never annotate the
violating pairs; a ratio far above 1 flags a loss term teaching the model something the data
does not say."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from relate.geometry import touch
from relate.metrics._tables import GroundTruth, Predictions
from relate.metrics.recall import rank_predictions

__all__ = ["disjoint_rate", "corpus_disjoint_rate", "predictions_disjoint_rate", "prior_violation_check"]


def disjoint_rate(box_s: np.ndarray, box_o: np.ndarray, predicates: np.ndarray, watched: set[str],
                  *, tol: float = 0.0) -> dict[str, float]:
    """Share of assertions of a watched predicate whose two boxes are disjoint (gap > tol px)."""
    norm = np.array([str(p).strip().lower() for p in predicates], dtype=object)
    w = np.isin(norm, np.array(sorted(s.lower() for s in watched), dtype=object))
    n = int(w.sum())
    dis = int((~touch(box_s[w], box_o[w], tol)).sum()) if n else 0
    return {"rate": dis / n if n else float("nan"), "n_asserted": float(n), "n_disjoint": float(dis)}


def corpus_disjoint_rate(table: pa.Table, watched: set[str], *, tol: float = 0.0) -> dict[str, float]:
    """The rate in a CORPUS_SCHEMA table (the training data's own prior)."""
    boxes = table.column("boxes").combine_chunks()
    off = boxes.offsets.to_numpy().astype(np.int64)
    off -= off[0]
    fb = boxes.flatten()
    xyxy = np.stack([fb.field(k).to_numpy(zero_copy_only=False).astype(np.float64) for k in ("x1", "y1", "x2", "y2")], 1) \
        if len(fb) else np.zeros((0, 4))
    rc = table.column("relations").combine_chunks()
    img = pc.list_parent_indices(rc).to_numpy().astype(np.int64)
    rel = rc.flatten()
    if len(rel) == 0:
        return disjoint_rate(np.zeros((0, 4)), np.zeros((0, 4)), np.zeros(0, object), watched)
    s = off[img] + rel.field("subject").to_numpy(zero_copy_only=False).astype(np.int64)
    o = off[img] + rel.field("object").to_numpy(zero_copy_only=False).astype(np.int64)
    return disjoint_rate(xyxy[s], xyxy[o], rel.field("predicate").to_numpy(zero_copy_only=False), watched, tol=tol)


def predictions_disjoint_rate(gt: GroundTruth, preds: Predictions, watched: set[str], *, top_k: int | None = None,
                              threshold: float | None = None, tol: float = 0.0) -> dict[str, float]:
    """The rate in a system's emitted graph on GT boxes: graph-constrained top-``top_k`` per
    image and/or the triplets scoring at least ``threshold`` (the deployed operating point)."""
    idx, _ = rank_predictions(preds, graph_constrained=True, max_k=top_k)
    if threshold is not None:
        idx = idx[preds.score[idx] >= threshold]
    base = gt.box_offsets[preds.image[idx]]
    return disjoint_rate(gt.boxes[base + preds.subject[idx]], gt.boxes[base + preds.object[idx]],
                         preds.vocab[preds.predicate[idx]], watched, tol=tol)


def prior_violation_check(train: pa.Table, gt: GroundTruth, preds: Predictions, watched: set[str], *,
                          top_k: int | None = 20, threshold: float | None = None) -> dict[str, float]:
    """Model rate, data rate and their ratio (H.3 reports 22x for the faulty loss variant)."""
    data = corpus_disjoint_rate(train, watched)
    model = predictions_disjoint_rate(gt, preds, watched, top_k=top_k, threshold=threshold)
    ratio = model["rate"] / data["rate"] if data["rate"] and np.isfinite(data["rate"]) else float("nan")
    return {"model_rate": model["rate"], "data_rate": data["rate"], "ratio": ratio,
            "model_asserted": model["n_asserted"], "data_asserted": data["n_asserted"]}
