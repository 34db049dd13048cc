"""Scoring a model against everything that holds in a scene, stated or not (the synthetic world's rules).

Recall against the stated relations rewards a model for echoing the annotator's choices; a world
whose full truth is known (``relate.data.synthetic_truth``) lets us ask the plainer question: over
every ordered pair of an image's boxes and every concept of the vocabulary, does the model score
what is true above what is not? Two figures answer it:

* **average precision per family**, over every (ordered pair, concept) cell of the family's
  concepts, pooled across images and concepts, label = the concept holds for that ordered pair.
  Pooling across concepts asks for scores that compare across predicates, which is what a top-k
  list of triplets needs; the per-concept APs are reported beside it;
* **top-k precision**: per image, the share of its ``min(k, |truth|)`` best cells that are true
  (the denominator shrinks for an image with fewer than k true relations, so 1.0 is reachable),
  averaged over the images with any truth;
* **recall within count**: the share of true relations that rank among their image's ``|truth|``
  best cells, pooled over relations, overall and per family. 1.0 means every image's truth is
  exactly its top of the list: what a model that has memorised its images reaches;
* **direction accuracy** per family, given ``inverse_of``: for each true relation whose concept has
  an inverse, does it outscore the inverse on the same ordered pair (ties count as wrong)? Chance
  is 0.5 and a model blind to what decides the direction cannot beat it, however it spreads its
  scores (recall within count can be gamed by scoring both directions high).

A cell the model never scored (its pair dropped by the pair sampler) ranks below every scored
cell; the share of true ordered pairs the sampler kept is reported as ``pair_coverage``.
Nothing here imports ray or torch: inputs are numpy arrays per image.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

import numpy as np
from sklearn.metrics import average_precision_score

__all__ = ["ImageCells", "TruthReport", "score_against_truth", "annotation_coverage"]


@dataclass(frozen=True)
class ImageCells:
    """One image's scores: ``pairs`` (P, 2) ordered box pairs the model scored, ``scores`` (P, C)
    a score per concept (higher = more likely), ``num_boxes`` the image's box count, and ``truth``
    the (subject, object, concept) triples that hold."""

    pairs: np.ndarray
    scores: np.ndarray
    num_boxes: int
    truth: frozenset[tuple[int, int, str]]


@dataclass
class TruthReport:
    """Per-family and per-concept AP, top-k precision, sampler coverage and cell counts."""

    family_ap: dict[str, float]
    concept_ap: dict[str, float]
    topk_precision: float
    k: int
    pair_coverage: float
    positives: dict[str, int] = field(default_factory=dict)
    images: int = 0
    count_recall: float = float("nan")
    family_count_recall: dict[str, float] = field(default_factory=dict)
    family_direction: dict[str, float] = field(default_factory=dict)
    family_pair_ap: dict[str, float] = field(default_factory=dict)

    def flat(self, prefix: str = "truth/") -> dict[str, float]:
        """Figures as one flat dict (what reports and TensorBoard take)."""
        out = {f"{prefix}family/{f}_ap": v for f, v in self.family_ap.items()}
        out.update({f"{prefix}concept/{c}_ap": v for c, v in self.concept_ap.items()})
        out.update({f"{prefix}family/{f}_count_recall": v for f, v in self.family_count_recall.items()})
        out.update({f"{prefix}family/{f}_direction": v for f, v in self.family_direction.items()})
        out.update({f"{prefix}family/{f}_pair_ap": v for f, v in self.family_pair_ap.items()})
        out.update({f"{prefix}top{self.k}_precision": self.topk_precision, f"{prefix}pair_coverage": self.pair_coverage,
                    f"{prefix}count_recall": self.count_recall, f"{prefix}images": float(self.images)})
        return out


def _dense(cells: ImageCells, concepts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(scores, labels, scored?) over every ordered pair (i != j) x concept of one image, rows in
    pair order (i, j) row-major; unscored pairs get -inf."""
    n, c = cells.num_boxes, len(concepts)
    if cells.scores.shape != (len(cells.pairs), c):
        raise ValueError(f"scores have shape {cells.scores.shape}, expected ({len(cells.pairs)}, {c}) for "
                         f"{len(cells.pairs)} pairs and {c} concepts")
    dense = np.full((n, n, c), -np.inf)
    scored = np.zeros((n, n), dtype=bool)
    if len(cells.pairs):
        p = np.asarray(cells.pairs, dtype=np.int64)
        if p.min() < 0 or p.max() >= n:
            raise ValueError(f"pair indices must lie in [0, {n}), got {p.min()}..{p.max()}")
        dense[p[:, 0], p[:, 1]] = cells.scores
        scored[p[:, 0], p[:, 1]] = True
    labels = np.zeros((n, n, c), dtype=bool)
    col = {name: k for k, name in enumerate(concepts)}
    for s, o, concept in cells.truth:
        if concept not in col:
            raise ValueError(f"true concept {concept!r} is not among the scored concepts {list(concepts)}")
        if not (0 <= s < n and 0 <= o < n) or s == o:
            raise ValueError(f"true relation ({s}, {o}, {concept!r}) does not name two distinct boxes of {n}")
        labels[s, o, col[concept]] = True
    off = ~np.eye(n, dtype=bool)
    return dense[off], labels[off], scored[off]


def _ap(scores: np.ndarray, labels: np.ndarray) -> float:
    if not labels.any():
        return float("nan")
    finite = np.isfinite(scores)
    floor = (scores[finite].min() - 1.0) if finite.any() else 0.0
    return float(average_precision_score(labels, np.where(finite, scores, floor)))


def _top_cells(scores: np.ndarray, labels: np.ndarray, k: int) -> np.ndarray:
    """Bool mask (like ``scores``) of the k best cells (ties broken against the model: false first)."""
    flat_s, flat_l = scores.reshape(-1), labels.reshape(-1)
    order = np.lexsort((flat_l, -flat_s))  # by score desc; among equal scores, false (0) before true
    top = np.zeros(flat_s.shape, dtype=bool)
    top[order[:k]] = True
    return top.reshape(scores.shape)


def _topk(scores: np.ndarray, labels: np.ndarray, k: int) -> float | None:
    """Share of true cells among the min(k, #true) best."""
    n_true = int(labels.sum())
    if n_true == 0:
        return None
    kk = min(k, n_true)
    return float((_top_cells(scores, labels, kk) & labels).sum() / kk)


def score_against_truth(images: Iterable[ImageCells], concepts: Sequence[str], family_of: Mapping[str, str],
                        k: int = 10, inverse_of: Mapping[str, str | None] | None = None) -> TruthReport:
    """AP per family and per concept over every (ordered pair, concept) cell, top-``k`` precision,
    recall within count, (with ``inverse_of``) direction accuracy, and per family the AP of finding
    its pairs (a pair's best cell of the family against whether any of the family's concepts holds
    on it), which separates "which pairs" from "which concept" when a family's AP falls short."""
    concepts = list(concepts)
    col = {c: j for j, c in enumerate(concepts)}
    inv = {j: col[inverse_of[c]] for c, j in col.items()
           if inverse_of and inverse_of.get(c) in col and inverse_of[c] != c}
    direction: dict[str, list[int]] = {}
    missing = [c for c in concepts if c not in family_of]
    if missing:
        raise ValueError(f"concepts without a family: {missing}")
    all_s, all_l, all_in, tops = [], [], [], []
    true_pairs = kept_pairs = n_img = 0
    for cells in images:
        s, lab, scored = _dense(cells, concepts)
        n_img += 1
        for j, ji in inv.items():  # true cells of a concept with an inverse: above the inverse, same pair?
            hit = lab[:, j]
            if hit.any():
                row = direction.setdefault(family_of[concepts[j]], [0, 0])
                row[0] += int(hit.sum())
                row[1] += int((s[hit, j] > s[hit, ji]).sum())
        all_s.append(s)
        all_l.append(lab)
        all_in.append(_top_cells(s, lab, int(lab.sum())) & lab)  # true and within its image's count
        t = _topk(s, lab, k)
        if t is not None:
            tops.append(t)
        has_truth = lab.any(axis=1)
        true_pairs += int(has_truth.sum())
        kept_pairs += int((has_truth & scored).sum())
    if not all_s:
        raise ValueError("no images to score")
    S, L, W = np.concatenate(all_s), np.concatenate(all_l), np.concatenate(all_in)
    concept_ap = {c: _ap(S[:, j], L[:, j]) for j, c in enumerate(concepts)}
    family_ap: dict[str, float] = {}
    family_pair_ap: dict[str, float] = {}
    family_count: dict[str, float] = {}
    positives: dict[str, int] = {}
    for fam in dict.fromkeys(family_of[c] for c in concepts):
        cols = [j for j, c in enumerate(concepts) if family_of[c] == fam]
        family_ap[fam] = _ap(S[:, cols].reshape(-1), L[:, cols].reshape(-1))
        # which pairs, apart from which of the family's concepts: a pair's best cell of the family
        # against whether any of its concepts holds there
        family_pair_ap[fam] = _ap(S[:, cols].max(axis=1), L[:, cols].any(axis=1))
        positives[fam] = int(L[:, cols].sum())
        family_count[fam] = float(W[:, cols].sum() / positives[fam]) if positives[fam] else float("nan")
    return TruthReport(family_ap, concept_ap, float(np.mean(tops)) if tops else float("nan"), k,
                       kept_pairs / true_pairs if true_pairs else float("nan"), positives, n_img,
                       float(W.sum() / L.sum()) if L.any() else float("nan"), family_count,
                       {f: right / n for f, (n, right) in direction.items()}, family_pair_ap)


def annotation_coverage(stated: Iterable[Iterable[tuple[int, int, str]]], truth: Iterable[Iterable[tuple[int, int, str]]],
                        family_of: Mapping[str, str], inverse_of: Mapping[str, str | None],
                        symmetric: Iterable[str] = ()) -> dict[str, dict[str, float]]:
    """Per family, how much of the truth a corpus states and how much of what it states is true.

    ``stated`` and ``truth`` are per image (subject, object, concept) triples; a statement also
    states its reverse (the inverse concept, or the same one for a symmetric concept), so
    ``(a, b, left_of)`` covers ``(b, a, right_of)``. Returns family -> {truth, covered (share of true
    relations stated), stated, not_true (share of statements that do not hold)}: the measure of
    the positive-unlabeled gap between training on annotation and training on the truth.
    """
    sym = set(symmetric)
    tot: dict[str, list[int]] = {}
    for st, tr in zip(stated, truth):
        st, tr = set(st), set(tr)
        closed = set(st)
        for s, o, c in st:
            rev = c if c in sym else inverse_of.get(c)
            if rev is not None:
                closed.add((o, s, rev))
        for s, o, c in tr:
            row = tot.setdefault(family_of[c], [0, 0, 0, 0])
            row[0] += 1
            row[1] += (s, o, c) in closed
        for s, o, c in st:
            row = tot.setdefault(family_of[c], [0, 0, 0, 0])
            row[2] += 1
            row[3] += (s, o, c) not in tr
    return {f: {"truth": n, "covered": k / n if n else float("nan"), "stated": m, "not_true": x / m if m else float("nan")}
            for f, (n, k, m, x) in tot.items()}
