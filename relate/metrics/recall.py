"""Scene-graph recall: R@K, mR@K, F1@K, wR@K and the rare/common/frequent buckets (seed 001, 5.1).

Definitions (all over the evaluated split, after deduplicating repeated GT triplets):

* R@K   fraction of an image's GT triplets found among its top-K predicted triplets, averaged
        over images that have at least one GT relation.
* mR@K  per predicate: recall over the images that contain it, averaged over those images (the
        usual per-image convention), then the mean over predicates with support.
* F1@K  harmonic mean of R@K and mR@K.
* wR@K  per-predicate recall weighted by log(N / n_c), N all GT relations, n_c the predicate's.
* buckets  mean per-predicate recall over predicates with support < 50 (rare), 50-500 (common)
        and > 500 (frequent), following LVIS.

Graph-constrained (the default) lets each ordered pair place only its best predicate among the K
slots; unconstrained lets one pair fill several. Two matchers: ``one_to_one`` assigns each GT
triplet to at most one prediction and each prediction to at most one GT triplet (and, with a
detector, each GT box to at most one detection); ``legacy`` credits a GT triplet whenever any
top-K prediction matches, with every IoU >= 0.5 link allowed (the reference implementation's
duplicate credit, 5.3).

Two protocols: ``paper`` (all of the above; graph-constrained one-to-one is the default) and
``sgb``, Scene-Graph-Benchmark.pytorch's own evaluation rule for rule (relate.metrics.sgb). The
legacy matcher alone does not reproduce SGB's numbers: use ``protocol="sgb"`` for that.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from relate.metrics._boxmatch import Detections, box_map, greedy_one_to_one
from relate.metrics._tables import GroundTruth, Predictions, expand_join
from relate.metrics.buckets import BUCKETS, bucket_of
from relate.metrics.per_image import per_image_recall
from relate.metrics.sgb import PROTOCOLS, sgb_recall

__all__ = ["MATCHERS", "PROTOCOLS", "BUCKETS", "RecallResult", "rank_predictions", "match_triplets",
           "recall_from_hits", "evaluate_recall", "bucket_of"]

MATCHERS = ("one_to_one", "legacy")


@dataclass
class RecallResult:
    """Every recall figure of one (system, split), with the protocol that produced it."""

    mode: str                 # "graph_constrained" | "unconstrained"
    matcher: str              # "one_to_one" | "legacy" (sgb: always "legacy", many-to-many)
    box_source: str           # "gt" | "detector" | "objects" (a scene-graphs file's own objects)
    ks: tuple[int, ...]
    metrics: dict[str, float]
    per_predicate: dict[int, dict[str, float]] = field(default_factory=dict)
    support: dict[str, int] = field(default_factory=dict)
    n_cls: dict[str, int] = field(default_factory=dict)
    protocol: str = "paper"   # "paper" | "sgb"
    # per-image rows (relate.metrics.per_image, PER_IMAGE_SCHEMA) when asked for; not in to_dict
    per_image: list[dict] | None = None
    # whether object labels decide a link: "scored" (a box links to a GT box only under the same label:
    # sgcls and sgdet by default, every sgb link) or "agnostic" (IoU alone, or the GT box's own index)
    object_labels: str = "agnostic"

    def to_dict(self) -> dict:
        return {"protocol": self.protocol, "mode": self.mode, "matcher": self.matcher, "box_source": self.box_source,
                "object_labels": self.object_labels,
                "ks": list(self.ks), "metrics": self.metrics,
                "per_predicate": {str(k): v for k, v in self.per_predicate.items()},
                "support": self.support, "n_cls": self.n_cls}


def rank_predictions(preds: Predictions, *, graph_constrained: bool = True,
                     max_k: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Indices into ``preds`` in per-image score order, and each one's 0-based rank in its image.

    Ties keep file order (a stable sort), so the ranking is deterministic. Under the graph
    constraint only the first (best) triplet of each ordered pair survives.
    """
    off = preds.offsets
    if off is not None and preds.n:
        counts = np.diff(off)
        if counts.size * int(counts.max()) <= 4 * preds.n + 1_000_000:
            return _rank_rows(preds, off, counts, graph_constrained, max_k)
    n = preds.n
    # one stable argsort of the scores gives every triplet a unique score rank (ties: file
    # order); integer keys then replace two-key lexsorts over millions of rows
    srank = np.empty(n, np.int64)
    srank[np.argsort(-preds.score, kind="stable")] = np.arange(n)
    order = np.arange(n)
    if graph_constrained and n:
        nb = int(max(preds.subject.max(), preds.object.max())) + 1
        pair = (preds.image * nb + preds.subject) * nb + preds.object
        if float(pair.max()) * n < 2.0 ** 62:
            by_pair = np.argsort(pair * n + srank)  # keys are unique: no stability needed
        else:  # keys would overflow int64
            by_pair = np.lexsort((srank, pair))
        p = pair[by_pair]
        first = np.ones(n, bool)
        first[1:] = p[1:] != p[:-1]
        order = by_pair[first]
    order = order[np.argsort(preds.image[order] * max(n, 1) + srank[order])]
    img = preds.image[order]
    start = np.ones(img.size, bool)
    start[1:] = img[1:] != img[:-1]
    first_pos = np.maximum.accumulate(np.where(start, np.arange(img.size), 0))
    rank = np.arange(img.size, dtype=np.int64) - first_pos
    if max_k is not None:
        keep = rank < max_k
        order, rank = order[keep], rank[keep]
    return order, rank


def _rank_rows(preds: Predictions, off: np.ndarray, counts: np.ndarray, graph_constrained: bool,
               max_k: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Same result as the global sort, computed as many short row-wise sorts: each file row
    (one image) becomes a row of a padded matrix, which is far cheaper than sorting all rows."""
    R, M, n = counts.size, int(counts.max()), preds.n
    row = np.repeat(np.arange(R), counts)
    col = np.arange(n) - off[:-1][row]
    # float32 is exact here (the schema stores scores as float32) and halves the memory traffic
    S = np.full((R, M), np.inf, dtype=np.float32)
    S[row, col] = -preds.score.astype(np.float32)
    o1 = np.argsort(S, axis=1, kind="stable")       # columns by descending score, padding last
    valid = np.arange(M)[None, :] < counts[:, None]
    keep = valid
    if graph_constrained:
        nb = int(max(preds.subject.max(), preds.object.max())) + 1
        dt = np.int32 if nb * nb < 2**31 - 1 else np.int64
        P = np.full((R, M), np.iinfo(dt).max, dtype=dt)
        P[row, col] = preds.subject * nb + preds.object
        Ps = np.take_along_axis(P, o1, 1)
        o2 = np.argsort(Ps, axis=1, kind="stable")   # best-scored triplet of each pair comes first
        Pss = np.take_along_axis(Ps, o2, 1)
        first = np.ones((R, M), bool)
        first[:, 1:] = Pss[:, 1:] != Pss[:, :-1]
        keep = np.zeros((R, M), bool)
        np.put_along_axis(keep, o2, first, 1)
        keep &= valid
    rank = np.cumsum(keep, axis=1) - 1
    sel = keep & (rank < max_k) if max_k is not None else keep
    return (off[:-1][:, None] + o1)[sel], rank[sel]


def _candidates(gt: GroundTruth, preds: Predictions, idx: np.ndarray,
                links: tuple[np.ndarray, np.ndarray, np.ndarray] | None) -> tuple[np.ndarray, ...]:
    """(row into idx, GT subject box, GT object box) for every way a prediction lands on GT boxes."""
    img, s, o = preds.image[idx], preds.subject[idx], preds.object[idx]
    if links is None:  # GT boxes: the prediction's indices are the GT indices
        return np.arange(idx.size, dtype=np.int64), s, o
    limg, lbox, lgt = links
    nb = int(max(lbox.max(initial=0), s.max(initial=0), o.max(initial=0))) + 1
    lkey = limg * nb + lbox
    r1, j1 = expand_join(img * nb + s, lkey)
    r2, j2 = expand_join(img[r1] * nb + o[r1], lkey)
    return r1[r2], lgt[j1[r2]], lgt[j2]


def match_triplets(gt: GroundTruth, preds: Predictions, idx: np.ndarray, rank: np.ndarray, *,
                   matcher: str = "one_to_one", links=None,
                   predicate_match: np.ndarray | None = None) -> np.ndarray:
    """Rank (0-based) of the prediction credited with each GT triplet; ``inf`` when none is.

    ``predicate_match[p_pred, p_gt]`` replaces string equality (synonym-tolerant matching, A3).
    """
    if matcher not in MATCHERS:
        raise ValueError(f"unknown matcher {matcher!r}; valid: {list(MATCHERS)}")
    hit = np.full(gt.rel_image.size, np.inf)
    if idx.size == 0 or gt.rel_image.size == 0:
        return hit
    row, gs, go = _candidates(gt, preds, idx, links)
    B = max(gt.max_boxes, 1)
    gkey = (gt.rel_image * B + gt.rel_subject) * B + gt.rel_object
    gorder = np.argsort(gkey, kind="stable")
    ckey = (preds.image[idx[row]] * B + gs) * B + go
    ci, gj = expand_join(ckey, gkey[gorder])
    rel = gorder[gj]
    pp, gp = preds.predicate[idx[row[ci]]], gt.rel_predicate[rel]
    ok = predicate_match[pp, gp] if predicate_match is not None else pp == gp
    rel, cand, r = rel[ok], row[ci[ok]], rank[row[ci[ok]]]
    if matcher == "legacy":
        np.minimum.at(hit, rel, r.astype(np.float64))
        return hit
    keep = greedy_one_to_one(rel, cand, -r.astype(np.float64))
    hit[rel[keep]] = r[keep]
    return hit


def recall_from_hits(gt: GroundTruth, hit_rank: np.ndarray, ks: Sequence[int]) -> tuple[dict, dict, dict, dict]:
    """Aggregate per-triplet hit ranks into the R/mR/F1/wR/bucket figures at each K."""
    V = gt.predicates.size
    support = gt.support()
    present = support > 0
    n_img = np.bincount(gt.rel_image, minlength=gt.n_images)
    has = n_img > 0
    group = gt.rel_image * max(V, 1) + gt.rel_predicate
    ug, ginv = np.unique(group, return_inverse=True)
    g_n = np.bincount(ginv, minlength=ug.size)
    g_pred = ug % max(V, 1)
    g_per_pred = np.bincount(g_pred, minlength=V)
    total = support.sum()
    w = np.where(present, np.log(np.maximum(total, 1) / np.maximum(support, 1)), 0.0)
    if w.sum() <= 0:  # one predicate only: IDF weights vanish, fall back to uniform
        w = present.astype(np.float64)
    buckets = bucket_of(support)
    metrics, per_pred = {}, {}
    for k in ks:
        h = (hit_rank < k).astype(np.float64)
        r_img = np.bincount(gt.rel_image, h, minlength=gt.n_images)[has] / n_img[has]
        R = float(r_img.mean()) if r_img.size else float("nan")
        g_r = np.bincount(ginv, h, minlength=ug.size) / g_n
        r_c = np.bincount(g_pred, g_r, minlength=V) / np.maximum(g_per_pred, 1)
        mR = float(r_c[present].mean()) if present.any() else float("nan")
        metrics[f"R@{k}"] = R
        metrics[f"mR@{k}"] = mR
        metrics[f"F1@{k}"] = 2 * R * mR / (R + mR) if (R + mR) > 0 else 0.0
        metrics[f"wR@{k}"] = float((w * r_c).sum() / w.sum()) if present.any() else float("nan")
        for name, _, _ in BUCKETS:
            m = present & (buckets == name)
            metrics[f"{name}@{k}"] = float(r_c[m].mean()) if m.any() else float("nan")
        per_pred[k] = {str(gt.predicates[c]): float(r_c[c]) for c in np.flatnonzero(present)}
    n_cls = {name: int((present & (buckets == name)).sum()) for name, _, _ in BUCKETS}
    sup = {str(gt.predicates[c]): int(support[c]) for c in np.flatnonzero(present)}
    return metrics, per_pred, sup, n_cls


def evaluate_recall(gt: GroundTruth, preds: Predictions, *, ks: Sequence[int] = (20, 50, 100),
                    graph_constrained: bool = True, matcher: str | None = None,
                    detections: Detections | None = None, iou_threshold: float = 0.5,
                    require_category: bool = False,
                    predicate_match: np.ndarray | None = None, protocol: str = "paper",
                    predicates: Sequence[str] | None = None,
                    object_scores: np.ndarray | None = None, per_image: bool = False) -> RecallResult:
    """The full recall report of one system on one split.

    ``paper``: with ``detections=None`` the predictions index the GT boxes and matching is by
    index; otherwise they index the detector's boxes and are linked to GT boxes by IoU. ``matcher``
    defaults to ``one_to_one``. ``sgb``: boxes always link by IoU and label (sgcls: pass the GT
    boxes with predicted labels as ``detections``), ``predicates`` is the label set whose size
    divides mR (default: the split's predicates), ``object_scores`` one score per indexed box.
    ``per_image`` (``paper`` only) also returns the rows R@K and mR@K average, in ``.per_image``.
    """
    ks = tuple(sorted(int(k) for k in ks))
    if not ks or ks[0] <= 0:
        raise ValueError(f"ks must be positive integers, got {ks}")
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; valid: {list(PROTOCOLS)}")
    mode = "graph_constrained" if graph_constrained else "unconstrained"
    source = "gt" if detections is None else "detector"
    labels = "scored" if protocol == "sgb" or (detections is not None and require_category) else "agnostic"
    if protocol == "sgb":
        if per_image:
            raise ValueError("per_image rows exist for protocol 'paper' only; got protocol 'sgb'")
        if matcher not in (None, "legacy"):
            raise ValueError(f"protocol 'sgb' credits many-to-many (matcher 'legacy'); got matcher {matcher!r}")
        if predicate_match is not None:
            raise ValueError("protocol 'sgb' matches predicates by label; predicate_match is not supported")
        boxes = None if detections is None else (detections.box_offsets, detections.boxes, detections.categories)
        metrics, per_pred, sup, n_cls = sgb_recall(gt, preds, ks=ks, graph_constrained=graph_constrained,
                                                   boxes=boxes, object_scores=object_scores,
                                                   predicates=predicates, iou_threshold=iou_threshold)
        metrics["n_images"] = float(gt.n_images)
        metrics["n_relations"] = float(gt.rel_repeats.sum() if gt.rel_repeats is not None else gt.rel_image.size)
        return RecallResult(mode, "legacy", source, ks, metrics, per_pred, sup, n_cls, protocol="sgb",
                            object_labels=labels)
    if predicates is not None or object_scores is not None:
        raise ValueError("predicates and object_scores are 'sgb' protocol options; protocol is 'paper'")
    matcher = matcher or "one_to_one"
    idx, rank = rank_predictions(preds, graph_constrained=graph_constrained, max_k=ks[-1])
    links = None
    if detections is not None:
        links = box_map(gt, detections, iou_threshold=iou_threshold,
                        one_to_one=(matcher == "one_to_one"), require_category=require_category)
    hit = match_triplets(gt, preds, idx, rank, matcher=matcher, links=links, predicate_match=predicate_match)
    metrics, per_pred, sup, n_cls = recall_from_hits(gt, hit, ks)
    metrics["n_images"] = float(gt.n_images)
    metrics["n_relations"] = float(gt.rel_image.size)
    rows = None
    if per_image:  # the same hit ranks as the report, so the rows add up to it exactly
        tag = {"protocol": "paper", "mode": mode, "matcher": matcher, "box_source": source}
        rows = [{**tag, **r} for r in per_image_recall(gt, hit, ks)]
    return RecallResult(mode, matcher, source, ks, metrics, per_pred, sup, n_cls, protocol="paper", per_image=rows,
                        object_labels=labels)
