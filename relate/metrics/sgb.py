"""The ``sgb`` protocol: recall as Scene-Graph-Benchmark.pytorch's VG evaluation computes it.

Written from a reading of that repository's ``vg_eval.py``, ``sgg_eval.py``, ``boxlist_ops.py``
and the relation head's post-processor (``relation_head/inference.py``); none of its code is used.
Each rule below names where it comes from; the paper's protocol lives in ``recall.py``.

* IoU with the legacy pixel convention: a box spans ``x2 - x1 + 1`` pixels, and the whole IoU is
  computed in float32 (its boxes are float32 tensors). A link needs IoU >= the threshold.
* A predicted triplet credits a GT relation when the predicate and both object labels agree and
  both boxes overlap enough, also in predcls (its "predicted" boxes are the GT boxes, so a pair of
  overlapping same-label GT boxes is interchangeable). One prediction credits every GT relation it
  matches, and a GT relation is found when any top-K prediction matches it (no one-to-one).
* GT rows count as annotated: an exact repeat and several predicates on one pair each count.
* Images without a GT relation, and images without a single predicted pair, are skipped: they
  enter neither R@K's average nor any predicate's mR list.
* mR@K: per predicate, the mean of its per-image recall over the images that contain it; the sum
  over all P predicates of the label set divided by P (a predicate never in GT adds 0).
* Graph-constrained: each pair keeps its best predicate (ties: the lowest label index) and pairs
  rank by predicate score x subject score x object score, in float32, descending.
* Unconstrained: every (pair, predicate) entry ranks by (subject x object score) x predicate score;
  only the top 100 are kept whatever K.
* Ties in either ranking: SGB sorts with a non-stable sort (torch.sort / np.argsort), whose order
  of equal scores depends on the library and hardware; here ties keep the pair's first appearance
  in the file (then the label index), i.e. a stable descending sort.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from relate.metrics._tables import GroundTruth, Predictions, expand_join
from relate.metrics.buckets import BUCKETS, bucket_of

__all__ = ["PROTOCOLS", "SGB_NOGC_CAP", "sgb_iou", "sgb_rank", "sgb_recall", "sgb_credit", "sgb_aggregate", "CreditIndex", "credit_index", "credit",
           "sgb_rank_dense"]

PROTOCOLS = ("paper", "sgb")
SGB_NOGC_CAP = 100  # SGB keeps only the 100 best unconstrained entries before cutting at K


def sgb_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of paired boxes (..., 4) x1 y1 x2 y2 with the +1 pixel convention, in float32."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    one, zero = np.float32(1), np.float32(0)
    wh = np.maximum(np.minimum(a[..., 2:], b[..., 2:]) - np.maximum(a[..., :2], b[..., :2]) + one, zero)
    inter = wh[..., 0] * wh[..., 1]
    area_a = (a[..., 2] - a[..., 0] + one) * (a[..., 3] - a[..., 1] + one)
    area_b = (b[..., 2] - b[..., 0] + one) * (b[..., 3] - b[..., 1] + one)
    with np.errstate(divide="ignore", invalid="ignore"):
        return inter / (area_a + area_b - inter)


def _codes(values: np.ndarray, table: dict) -> np.ndarray:
    return np.fromiter((table.setdefault(v, len(table)) for v in values.tolist()), np.int64, values.size)


def _links(gt: GroundTruth, box_offsets: np.ndarray, boxes: np.ndarray, labels: np.ndarray,
           iou_threshold: float, chunk: int = 1 << 22) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every (image, predicted box, GT box) with equal labels and IoU >= threshold (no one-to-one).

    All box pairs of an image are compared; images go in blocks of about ``chunk`` pairs, so an
    sgdet output (80 detections x dozens of GT boxes x 26k images) never holds them all at once.
    Only images with boxes on both sides are visited, and only their GT labels encoded: a batch
    of a streamed split costs its own images, not the split's (26k images, 370k GT boxes).
    """
    ng, npb = gt.n_boxes, np.diff(box_offsets)
    images = np.flatnonzero(ng * npb > 0)
    n_gt = ng[images]
    gt_rows = np.repeat(gt.box_offsets[images] - np.cumsum(n_gt) + n_gt, n_gt) + np.arange(int(n_gt.sum()))
    table: dict = {}
    gl = np.full(gt.categories.size, -1, np.int64)
    gl[gt_rows] = _codes(gt.categories[gt_rows], table)
    pl = _codes(labels, table)
    cum = np.concatenate([[0], np.cumsum((ng * npb)[images])])
    out, lo = [], 0
    while lo < images.size:
        hi = max(lo + 1, int(np.searchsorted(cum, cum[lo] + chunk, side="right")) - 1)
        out.append(_links_block(gt, box_offsets, boxes, gl, pl, images[lo:min(hi, images.size)], iou_threshold))
        lo = hi
    if not out:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    return tuple(np.concatenate(x) for x in zip(*out))  # type: ignore[return-value]


def _links_block(gt: GroundTruth, box_offsets: np.ndarray, boxes: np.ndarray, gl: np.ndarray, pl: np.ndarray,
                 images: np.ndarray, iou_threshold: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    ng, npb = gt.n_boxes[images], np.diff(box_offsets)[images]
    cnt = ng * npb
    k = np.repeat(np.arange(images.size, dtype=np.int64), cnt)
    t = np.arange(k.size, dtype=np.int64) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    img = images[k]
    pi, gi = t // np.maximum(ng[k], 1), t % np.maximum(ng[k], 1)
    pb, gb = box_offsets[img] + pi, gt.box_offsets[img] + gi
    ok = pl[pb] == gl[gb]
    img, pi, gi, pb, gb = img[ok], pi[ok], gi[ok], pb[ok], gb[ok]
    ok = sgb_iou(boxes[pb], gt.boxes[gb]) >= iou_threshold
    return img[ok], pi[ok], gi[ok]


def _starts(key: np.ndarray) -> np.ndarray:
    first = np.ones(key.size, bool)
    first[1:] = key[1:] != key[:-1]
    return first


def _rank_in_image(img_sorted: np.ndarray) -> np.ndarray:
    first = _starts(img_sorted)
    pos = np.arange(img_sorted.size, dtype=np.int64)
    return pos - np.maximum.accumulate(np.where(first, pos, 0))


def sgb_rank(preds: Predictions, label: np.ndarray, obj_score: np.ndarray, box_offsets: np.ndarray, *,
             graph_constrained: bool, max_k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row into ``preds``, its 0-based rank in its image, image index of every scored pair).

    ``label[t]`` is triplet t's predicate index in the label set (-1: not in it, never scored);
    ``obj_score`` is one float32 score per box, aligned with ``box_offsets``.
    """
    e = np.flatnonzero(label >= 0)
    img, li = preds.image[e], label[e]
    p32 = preds.score[e].astype(np.float32)
    nb = int(max(preds.subject.max(initial=0), preds.object.max(initial=0))) + 1
    pair = (img * nb + preds.subject[e]) * nb + preds.object[e]
    s32 = obj_score[box_offsets[img] + preds.subject[e]]
    o32 = obj_score[box_offsets[img] + preds.object[e]]
    # one slot per pair: its best predicate, ties to the lowest label index (SGB's argmax)
    by_pair = np.lexsort((li, -p32, pair))
    head = _starts(pair[by_pair])
    best = by_pair[head]
    appear = np.minimum.reduceat(by_pair, np.flatnonzero(head)) if e.size else best
    triple = (p32[best] * s32[best]) * o32[best]
    order = np.lexsort((appear, -triple, img[best]))
    pair_rank = np.empty(best.size, np.int64)
    pair_rank[order] = _rank_in_image(img[best][order])
    pair_img = img[best]
    if graph_constrained:
        keep = pair_rank[order] < max_k
        rows = best[order][keep]
        return e[rows], pair_rank[order][keep], pair_img
    # unconstrained: one entry per (pair, predicate), the pair's GC rank and the label break ties
    by_entry = np.lexsort((-p32, li, pair))
    first = by_entry[_starts((pair * (label.max(initial=0) + 1) + li)[by_entry])]
    gc_rank = np.repeat(pair_rank, np.diff(np.append(np.flatnonzero(head), e.size)))
    rank_of = np.empty(e.size, np.int64)
    rank_of[by_pair] = gc_rank
    score = (s32[first] * o32[first]) * p32[first]
    order = np.lexsort((li[first], rank_of[first], -score, img[first]))
    rank = _rank_in_image(img[first][order])
    keep = rank < min(max_k, SGB_NOGC_CAP)
    return e[first[order][keep]], rank[keep], pair_img


def _label_index(names: np.ndarray, label_set: dict[str, int]) -> np.ndarray:
    return np.array([label_set.get(str(n), -1) for n in names.tolist()], dtype=np.int64)


def sgb_recall(gt: GroundTruth, preds: Predictions, *, ks: Sequence[int], graph_constrained: bool = True,
               boxes: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
               object_scores: np.ndarray | None = None, predicates: Sequence[str] | None = None,
               iou_threshold: float = 0.5) -> tuple[dict, dict, dict, dict]:
    """(metrics, per-predicate recall, support, bucket sizes) under SGB's evaluation.

    ``boxes`` is (box_offsets, xyxy, labels) of the boxes the predictions index: None means the
    GT boxes with their GT labels (predcls); GT boxes with predicted labels is sgcls; a detector's
    boxes is sgdet. ``object_scores`` (one per such box) defaults to 1. ``predicates`` is the label
    set in classifier order (P = its length); None takes the split's own predicates. Predicted
    strings outside it are not scored (SGB's classifier has no column for them) and are counted
    in ``n_unscored_triplets``; a (pair, predicate) listed twice is one entry at its best score.
    """
    off, xyxy, labels = boxes if boxes is not None else (gt.box_offsets, gt.boxes, gt.categories)
    label_set, index, gli = _label_set(gt, predicates)
    scores = (np.ones(int(off[-1]), np.float32) if object_scores is None
              else np.asarray(object_scores, np.float32))
    if scores.shape != (int(off[-1]),):
        raise ValueError(f"sgb: object_scores has shape {scores.shape}; need one per box ({int(off[-1])},)")
    pli = _label_index(preds.vocab, index)[preds.predicate] if preds.n else np.zeros(0, np.int64)
    idx, rank, pair_img = sgb_rank(preds, pli, scores, off, graph_constrained=graph_constrained,
                                   max_k=max(ks))
    hit_rank = sgb_credit(gt, gli, len(label_set), (off, xyxy, labels), preds.image[idx], preds.subject[idx],
                          preds.object[idx], pli[idx], rank, iou_threshold)
    return sgb_aggregate(gt, gli, hit_rank, pair_img, label_set, ks, n_unscored=int((pli < 0).sum()))


def _label_set(gt: GroundTruth, predicates: Sequence[str] | None) -> tuple[list, dict[str, int], np.ndarray]:
    """(label set, its index, each GT row's label index); every GT predicate must be in the set."""
    label_set = list(gt.predicates if predicates is None else predicates)
    index = {str(p): i for i, p in enumerate(label_set)}
    gli = _label_index(gt.predicates, index)[gt.rel_predicate]
    if (gli < 0).any():
        missing = sorted({str(gt.predicates[c]) for c in gt.rel_predicate[gli < 0]})
        raise ValueError(f"sgb: GT predicates {missing[:5]} are not in the label set of {len(label_set)} predicates")
    return label_set, index, gli


@dataclass(frozen=True)
class CreditIndex:
    """What crediting needs from the GT and the scored boxes, sorted once: every label-and-IoU
    link keyed by (image, scored box), and every GT row keyed by (image, s, o, label)."""

    B: int
    P: int
    link_key: np.ndarray    # sorted image * B + scored box
    link_gt: np.ndarray     # the GT box of each link, same order
    gt_key: np.ndarray      # sorted ((image * B + s) * B + o) * P + label of each GT row
    gt_row: np.ndarray      # the GT row of each, same order


def credit_index(gt: GroundTruth, gli: np.ndarray, P: int, boxes: tuple[np.ndarray, np.ndarray, np.ndarray],
                 iou_threshold: float) -> CreditIndex:
    off, xyxy, labels = boxes
    limg, lp, lg = _links(gt, off, xyxy, labels, iou_threshold)
    B = int(max(gt.max_boxes, int(np.diff(off).max(initial=0)), 1))
    lkey = limg * B + lp
    lorder = np.argsort(lkey, kind="stable")
    # only the GT rows of images with scored boxes can be credited: a streamed batch sorts its own
    rows = np.flatnonzero((np.diff(off) > 0)[gt.rel_image])
    gkey = ((gt.rel_image[rows] * B + gt.rel_subject[rows]) * B + gt.rel_object[rows]) * max(P, 1) + gli[rows]
    gorder = np.argsort(gkey, kind="stable")
    return CreditIndex(B, max(P, 1), lkey[lorder], lg[lorder], gkey[gorder], rows[gorder])


def credit(ix: CreditIndex, n_rows: int, img: np.ndarray, sub: np.ndarray, obj: np.ndarray, lab: np.ndarray,
           rank: np.ndarray) -> np.ndarray:
    """Best (lowest) rank at which each of the ``n_rows`` GT rows is credited, inf if never: every
    ranked entry (image, subject box, object box, label index, rank) credits each GT row whose
    predicate is its label and whose two boxes it links to by label and IoU (many-to-many)."""
    B = ix.B
    r1, j1 = expand_join(img * B + sub, ix.link_key)
    r2, j2 = expand_join(img[r1] * B + obj[r1], ix.link_key)
    row, gs, go = r1[r2], ix.link_gt[j1[r2]], ix.link_gt[j2]
    ckey = ((img[row] * B + gs) * B + go) * ix.P + lab[row]
    pos = np.minimum(np.searchsorted(ix.gt_key, ckey), max(ix.gt_key.size - 1, 0))
    ok = ix.gt_key[pos] == ckey if ix.gt_key.size else np.zeros(ckey.size, bool)
    hit_rank = np.full(n_rows, np.inf)
    np.minimum.at(hit_rank, ix.gt_row[pos[ok]], rank[row[ok]].astype(np.float64))
    return hit_rank


def sgb_credit(gt: GroundTruth, gli: np.ndarray, P: int, boxes: tuple[np.ndarray, np.ndarray, np.ndarray],
               img: np.ndarray, sub: np.ndarray, obj: np.ndarray, lab: np.ndarray, rank: np.ndarray,
               iou_threshold: float) -> np.ndarray:
    """:func:`credit` through a fresh :func:`credit_index` of ``boxes`` (one call, one index)."""
    return credit(credit_index(gt, gli, P, boxes, iou_threshold), gt.rel_image.size, img, sub, obj, lab, rank)


def sgb_aggregate(gt: GroundTruth, gli: np.ndarray, hit_rank: np.ndarray, pair_img: np.ndarray, label_set: list,
                  ks: Sequence[int], n_unscored: int = 0) -> tuple[dict, dict, dict, dict]:
    """SGB's averages of the per-row hit ranks (GT repeats count; see _aggregate)."""
    rep = gt.rel_repeats if gt.rel_repeats is not None else np.ones(gt.rel_image.size, np.int64)
    return _aggregate(gt, gli, rep, hit_rank, pair_img, label_set, ks, n_unscored=n_unscored)


def _aggregate(gt, gli, rep, hit_rank, pair_img, label_set, ks, n_unscored):
    """R@K over scored images, mR@K over the label set; F1, wR and buckets as the paper defines them."""
    P = len(label_set)
    n_rows = np.bincount(gt.rel_image, rep, minlength=gt.n_images)
    scored = (n_rows > 0) & (np.bincount(pair_img, minlength=gt.n_images) > 0)
    use = scored[gt.rel_image]
    group = gt.rel_image[use] * max(P, 1) + gli[use]
    ug, ginv = np.unique(group, return_inverse=True)
    g_pred = ug % max(P, 1)
    g_n = np.bincount(ginv, rep[use], minlength=ug.size)
    g_per_pred = np.bincount(g_pred, minlength=P)
    support = np.bincount(gli, rep, minlength=P).astype(np.int64)
    present = support > 0
    w = np.where(present, np.log(max(support.sum(), 1) / np.maximum(support, 1)), 0.0)
    if w.sum() <= 0:
        w = present.astype(np.float64)
    names = bucket_of(support)
    metrics, per_pred = {}, {}
    for k in ks:
        h = (hit_rank < k) * rep.astype(np.float64)
        r_img = np.bincount(gt.rel_image, h, minlength=gt.n_images)[scored] / n_rows[scored]
        R = float(r_img.mean()) if r_img.size else float("nan")
        g_r = np.bincount(ginv, h[use], minlength=ug.size) / np.maximum(g_n, 1)
        r_c = np.bincount(g_pred, g_r, minlength=P) / np.maximum(g_per_pred, 1)  # no image: 0
        mR = float(r_c.sum() / P) if P else float("nan")
        metrics[f"R@{k}"], metrics[f"mR@{k}"] = R, mR
        metrics[f"F1@{k}"] = 2 * R * mR / (R + mR) if (R + mR) > 0 else 0.0
        metrics[f"wR@{k}"] = float((w * r_c).sum() / w.sum()) if present.any() else float("nan")
        for name, _, _ in BUCKETS:
            m = present & (names == name)
            metrics[f"{name}@{k}"] = float(r_c[m].mean()) if m.any() else float("nan")
        per_pred[k] = {str(label_set[c]): float(r_c[c]) for c in range(P)}
    metrics["n_images_scored"] = float(scored.sum())
    metrics["n_predicates"] = float(P)
    metrics["n_unscored_triplets"] = float(n_unscored)
    n_cls = {name: int((present & (names == name)).sum()) for name, _, _ in BUCKETS}
    sup = {str(label_set[c]): int(support[c]) for c in np.flatnonzero(present)}
    return metrics, per_pred, sup, n_cls


def sgb_rank_dense(pair_offsets: np.ndarray, pair_image: np.ndarray, subject_score: np.ndarray,
                   object_score: np.ndarray, scores: np.ndarray, *, graph_constrained: bool,
                   max_k: int, row_max: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(pair row, label column, 0-based rank in its image) of SGB's ranked entries of a dense output.

    ``scores`` is (pairs, P) float32 with columns in label-set order; the pairs of one image are
    the contiguous block ``pair_offsets[r]:[r + 1]``. The same rules as :func:`sgb_rank`, on the
    matrix itself: the row's maximum ranks a pair in the graph-constrained slot, and its first
    column (SGB's argmax) is looked up for the ranked pairs only. Only what can reach the top
    ``max_k`` (or the unconstrained 100) is sorted: a per-image partition finds the k-th best pair
    (or a bound on the k-th best entry) first, so an sgdet image (6,320 pairs x 50) sorts about a
    hundred pairs, not all of them, and the unconstrained products are formed for those pairs only.
    ``row_max`` (``scores.max(axis=1)``) may be passed in when both modes rank one matrix.
    """
    N, P = scores.shape
    if row_max is None:
        row_max = scores.max(axis=1) if P else np.zeros(N, np.float32)
    p32 = np.asarray(row_max, np.float32)
    triple = (p32 * subject_score) * object_score
    block = np.repeat(np.arange(pair_offsets.size - 1), np.diff(pair_offsets))
    if graph_constrained:
        # a pair ranks below max_k once max_k pairs of its image score above it: only the pairs at
        # or above the image's max_k-th best score are sorted (ties: the pair's place in the file)
        top = _at_least(triple, _kth_largest_per_block(triple[:, None], pair_offsets, max_k)[block])
        order = top[np.argsort(_desc_key(pair_image[top], triple[top]), kind="stable")]
        rank = _rank_in_image(pair_image[order])
        ranked = order[rank < max_k]
        best = scores[ranked].argmax(axis=1) if P else np.zeros(ranked.size, np.int64)  # first maximum
        return ranked, best.astype(np.int64), rank[rank < max_k]
    cap = min(max_k, SGB_NOGC_CAP)
    so = subject_score * object_score  # float32, as SGB multiplies
    # (s x o) x best score is the largest entry of a pair's row when s x o >= 0 (rounding is
    # monotone), so the image's cap-th largest of these bounds its cap-th largest entry from
    # below: a pair under the bound has no entry in the top cap. Other pairs are always kept.
    plain = np.isfinite(so) & (so >= 0)
    row_top = np.where(plain, so * p32, np.float32(-np.inf))
    bound = _kth_largest_per_block(row_top[:, None], pair_offsets, cap)
    cand = np.flatnonzero(_at_least(row_top, bound[block], mask=True) | ~plain)
    c_off = np.concatenate([[0], np.cumsum(np.bincount(block[cand], minlength=pair_offsets.size - 1))])
    overall = so[cand][:, None] * scores[cand] if cand.size < N else so[:, None] * scores  # float32, as SGB
    thr = _kth_largest_per_block(overall, c_off, cap)
    ci, col = np.nonzero(overall >= thr[block[cand]][:, None])
    sel = overall[ci, col]
    # ties: the pair's graph-constrained order (best score, then place in the file), then the label
    gc_order = np.empty(cand.size, np.int64)
    gc_order[np.argsort(_desc_key(pair_image[cand], triple[cand]), kind="stable")] = np.arange(cand.size)
    pr = cand[ci]
    order = np.lexsort((gc_order[ci] * max(P, 1) + col, _desc_key(pair_image[pr], sel)))
    rank = _rank_in_image(pair_image[pr][order])
    keep = rank < cap
    return pr[order][keep], col[order][keep].astype(np.int64), rank[keep]


def _at_least(values: np.ndarray, thr: np.ndarray, mask: bool = False) -> np.ndarray:
    """Rows whose value is not below its threshold (NaN counts as not below: such rows stay in
    the sort, wherever it puts them); their indices, or the boolean mask."""
    m = ~(values < thr)
    return m if mask else np.flatnonzero(m)


def _desc_key(group: np.ndarray, score: np.ndarray) -> np.ndarray:
    """uint64 keys sorting by ``group`` ascending, then float32 ``score`` descending: one integer
    sort instead of a multi-key lexsort (scores are finite; -0 and +0 tie, as they compare equal)."""
    b = (np.asarray(score, np.float32) + np.float32(0)).view(np.uint32).astype(np.uint64)
    asc = np.where(b >> np.uint64(31), ~b & np.uint64(0xFFFFFFFF), b | np.uint64(0x80000000))
    return (group.astype(np.uint64) << np.uint64(32)) | (np.uint64(0xFFFFFFFF) - asc)


def _kth_largest_per_block(values: np.ndarray, pair_offsets: np.ndarray, k: int,
                           chunk_values: int = 1 << 21) -> np.ndarray:
    """Per block of rows ``pair_offsets[r]:[r + 1]`` of ``values`` (pairs, P): its k-th largest
    entry, or -inf when it has k entries or fewer. Blocks of one size go through np.partition
    together, in chunks of about ``chunk_values`` entries to bound the memory."""
    P = values.shape[1]
    n = np.diff(pair_offsets)
    thr = np.full(n.size, -np.inf, np.float32)
    flat = values.reshape(-1)
    big = np.flatnonzero(n * P > k)
    for L in np.unique(n[big]):
        blocks = big[n[big] == L]
        width = int(L) * P
        step = max(1, chunk_values // width)
        cols = np.arange(width)
        for i in range(0, blocks.size, step):
            b = blocks[i:i + step]
            X = flat[(pair_offsets[b] * P)[:, None] + cols[None, :]]
            thr[b] = np.partition(X, width - k, axis=1)[:, width - k]
    return thr
