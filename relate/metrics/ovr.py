"""OvR-SGG figures (seed 001, § 6.7, Tables 8 and 24): Base+Novel and Novel recall, mean recall, and
how many predicates a system ever puts in its top K.

Read from OvSGTR's own evaluator (``datasets/sgg_metrics.py``, ``OvrSGZeroShotRecall``; none of its
code is used): Novel R@K is each image's recall over its GT relations with a novel predicate, from
the same graph-constrained top-K list that Base+Novel R@K scores, averaged over the images that hold
at least one such relation. Base+Novel is the plain R@K of every GT relation.

Two matchers: ``sgb``, the leaderboard's (a predicted triplet credits every GT relation it matches
by labels and IoU, so duplicate detections of one object each get a chance; relate.metrics.sgb),
and ``one_to_one``, Table 24's correction (a GT object is linked to at most one detection, the
highest-IoU one of its class). On GT boxes the two differ only where two same-label GT boxes overlap.

``fold`` maps surface strings to one name per synonym group before anything is scored (the
synthetic world states a concept with several strings; VG150 has one per predicate): the GT rows
take their group's name and each (pair, group) keeps its best-scoring string.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable, Mapping, Sequence

import numpy as np

from relate.metrics._tables import GroundTruth, Predictions
from relate.metrics.recall import evaluate_recall, rank_predictions

__all__ = ["OVR_MATCHERS", "fold_ground_truth", "fold_predictions", "novel_rows", "ovr_scores"]

OVR_MATCHERS = ("sgb", "one_to_one")


def fold_ground_truth(gt: GroundTruth, fold: Mapping[str, str]) -> GroundTruth:
    """``gt`` with each predicate string replaced by ``fold``'s name for it (unmapped strings stay);
    rows that become identical are one row, their repeats added."""
    names = np.array([fold.get(str(p), str(p)) for p in gt.predicates], dtype=object)
    vocab, code = np.unique(names.astype(str), return_inverse=True)
    key = np.stack([gt.rel_image, gt.rel_subject, gt.rel_object, code[gt.rel_predicate]], axis=1)
    rows, inv = np.unique(key, axis=0, return_inverse=True) if key.size else (key.reshape(0, 4), np.zeros(0, np.int64))
    rep = gt.rel_repeats if gt.rel_repeats is not None else np.ones(gt.rel_image.size, np.int64)
    repeats = np.bincount(inv.ravel(), rep, minlength=len(rows)).astype(np.int64)
    return replace(gt, rel_image=rows[:, 0], rel_subject=rows[:, 1], rel_object=rows[:, 2], rel_predicate=rows[:, 3],
                   predicates=vocab.astype(object), rel_repeats=repeats)


def fold_predictions(preds: Predictions, fold: Mapping[str, str], gt: GroundTruth) -> Predictions:
    """``preds`` with one triplet per (image, subject, object, folded name) at its best score, coded
    into the folded ``gt``'s vocabulary first (names outside it after)."""
    names = np.array([fold.get(str(p), str(p)) for p in preds.vocab], dtype=object)
    vocab = list(gt.predicates) + sorted(set(names.tolist()) - set(gt.predicates.tolist()))
    index = {v: i for i, v in enumerate(vocab)}
    code = np.array([index[n] for n in names], dtype=np.int64)
    if not preds.n:
        return replace(preds, predicate=preds.predicate, vocab=np.array(vocab, dtype=object), offsets=None)
    key = np.stack([preds.image, preds.subject, preds.object, code[preds.predicate]], axis=1)
    rows, inv = np.unique(key, axis=0, return_inverse=True)
    best = np.full(len(rows), -np.inf)
    np.maximum.at(best, inv.ravel(), preds.score)
    return replace(preds, image=rows[:, 0], subject=rows[:, 1], object=rows[:, 2], predicate=rows[:, 3], score=best,
                   vocab=np.array(vocab, dtype=object), offsets=None)


def novel_rows(gt: GroundTruth, novel: Iterable[str]) -> GroundTruth:
    """``gt`` keeping only the relations whose predicate is in ``novel`` (every image and box stays)."""
    names = set(novel)
    keep = np.isin(gt.rel_predicate, [i for i, p in enumerate(gt.predicates) if str(p) in names])
    rep = None if gt.rel_repeats is None else gt.rel_repeats[keep]
    return replace(gt, rel_image=gt.rel_image[keep], rel_subject=gt.rel_subject[keep], rel_object=gt.rel_object[keep],
                   rel_predicate=gt.rel_predicate[keep], rel_repeats=rep)


def _predicted(preds: Predictions, k: int) -> set[str]:
    """Distinct predicates among every image's graph-constrained top ``k``."""
    if not preds.n:
        return set()
    idx, rank = rank_predictions(preds, graph_constrained=True, max_k=k)
    return {str(p) for p in preds.vocab[np.unique(preds.predicate[idx[rank < k]])]}


def ovr_scores(gt: GroundTruth, preds: Predictions, novel: Sequence[str], *, label_set: Sequence[str],
               ks: Sequence[int] = (20, 50, 100), matcher: str = "sgb", detections=None,
               iou_threshold: float = 0.5, count_k: int = 50) -> dict:
    """Table 8's figures of one system under one matcher, graph-constrained.

    ``label_set`` is the benchmark's predicate list (mR divides by its size under ``sgb``, as SGB's
    evaluator does; ``novel`` must be part of it). ``detections``: the boxes ``preds`` index, when
    they are not the GT boxes (relate.metrics.load_detections; the one-to-one matcher needs their
    categories). ``predicted`` counts the distinct predicates of every image's top ``count_k``.
    """
    if matcher not in OVR_MATCHERS:
        raise ValueError(f"unknown OvR-SGG matcher {matcher!r}; valid: {list(OVR_MATCHERS)}")
    label_set = [str(p) for p in label_set]
    novel = [str(p) for p in novel]
    outside = sorted(set(novel) - set(label_set))
    if outside:
        raise ValueError(f"novel predicates {outside} are not in the benchmark's label set of {len(label_set)}; is the "
                         f"split for another benchmark, or does it need folding to synonym groups?")
    extra = sorted({str(p) for p in gt.predicates} - set(label_set))
    if extra:
        raise ValueError(f"GT predicates {extra[:5]} are not in the label set of {len(label_set)} predicates")
    ks = tuple(sorted(int(k) for k in ks))
    if matcher == "sgb":
        kw = dict(ks=ks, graph_constrained=True, protocol="sgb", predicates=label_set, detections=detections,
                  iou_threshold=iou_threshold)
    else:
        kw = dict(ks=ks, graph_constrained=True, matcher="one_to_one", detections=detections,
                  iou_threshold=iou_threshold, require_category=detections is not None)
    full = evaluate_recall(gt, preds, **kw)
    nov = evaluate_recall(novel_rows(gt, novel), preds, **kw)
    present = {str(p) for p in gt.predicates[np.unique(gt.rel_predicate)]}
    out: dict = {"matcher": matcher, "n_images": int(gt.n_images),
                 "n_images_with_novel": int(np.unique(novel_rows(gt, novel).rel_image).size),
                 "n_relations": int(gt.rel_image.size), "n_novel_relations": int(novel_rows(gt, novel).rel_image.size)}
    for k in ks:
        out[f"R@{k}"] = full.metrics[f"R@{k}"]
        out[f"novel_R@{k}"] = nov.metrics[f"R@{k}"]
        # mR: per predicate, recall over the images holding it; sgb divides by the whole label set
        # (a predicate never in GT adds 0), the paper protocol by the predicates present
        per = full.per_predicate[k]
        pool = label_set if matcher == "sgb" else [p for p in label_set if p in present]
        out[f"mR@{k}"] = float(np.mean([per.get(p, 0.0) for p in pool])) if pool else float("nan")
        npool = [p for p in pool if p in novel]
        out[f"novel_mR@{k}"] = float(np.mean([per.get(p, 0.0) for p in npool])) if npool else float("nan")
    seen = _predicted(preds, count_k)
    out["count_k"] = count_k
    out["predicted"] = len(seen & set(label_set))
    out["predicted_novel"] = len(seen & set(novel))
    out["n_predicates"], out["n_novel"] = len(label_set), len(novel)
    return out
