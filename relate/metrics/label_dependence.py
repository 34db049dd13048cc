"""How much of a system's predicate output is a lookup of its object-label pair (seed 001, § 7.1, Table 9).

Works on any system's predictions in the objects layout (``relate.schema.SCENE_GRAPHS_SCHEMA``:
per image the predicted objects with labels and the scored triplets that refer to them), so a
baseline's exported results are measured exactly like ours. Five figures:

* **self-lookup**: a table of the system's own most frequent predicate per (subject label, object
  label) is fitted on one half of the images and scored on the other half, and the other way round;
  the share of predictions the table reproduces (pooled over both halves). A label pair the fitting
  half never saw cannot be reproduced and counts as a miss (``lookup_coverage`` says how often;
  ``self_lookup_covered`` is the share over the predictions whose pair was seen).
* **H(p | c_s, c_o)** in nats: the entropy of the predicate left once the label pair is known,
  sum over pairs c of P(c) H(p | c); and its **ratio** to the marginal H(p). 0 means the predicate
  is a function of the labels.
* **freq. agreement**: share of predictions equal to the training-majority predicate of their
  label pair (needs the training table; pairs missing from it count as disagreement).
* **distinct predicates**: how many different predicates the system ever outputs.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import asdict, dataclass
from typing import Mapping, Sequence

import numpy as np
import pyarrow as pa
from scipy.stats import entropy

__all__ = ["LabelTriplets", "LabelDependence", "label_triplets", "majority_table", "label_dependence",
           "image_halves"]

LabelPair = tuple[str, str]


@dataclass(frozen=True)
class LabelTriplets:
    """One row per predicted triplet: its image and the labels of its two ends."""

    image_id: np.ndarray  # (n,) str
    subject_label: np.ndarray  # (n,) str
    object_label: np.ndarray  # (n,) str
    predicate: np.ndarray  # (n,) str

    def __len__(self) -> int:
        return len(self.predicate)


@dataclass(frozen=True)
class LabelDependence:
    """Table 9's row for one system (shares in [0, 1], entropies in nats)."""

    triplets: int
    images: int
    self_lookup: float
    lookup_coverage: float  # share of scored predictions whose label pair the fitting half had seen
    self_lookup_covered: float  # self-lookup over those predictions only (1.0 for a pure lookup)
    cond_entropy: float  # H(p | c_s, c_o)
    entropy: float  # H(p)
    entropy_ratio: float  # H(p | c_s, c_o) / H(p); NaN when H(p) = 0
    freq_agreement: float | None  # None without a training table
    distinct_predicates: int
    vocabulary_size: int | None

    def row(self) -> dict[str, float | int | None]:
        return asdict(self)


def label_triplets(table: pa.Table, top_k: int | None = None, *, name: str = "predictions") -> LabelTriplets:
    """Flatten predictions in the objects layout to labelled triplets, the ``top_k`` highest-scoring
    per image (all when None; Table 9 uses top-50 pairs). A triplet whose end has no label (a
    class-agnostic box) cannot be looked up: an error naming the image and object index."""
    for col in ("image_id", "objects", "triplets"):
        if col not in table.column_names:
            raise ValueError(f"{name}: column {col!r} missing; the objects layout needs image_id, objects and "
                             f"triplets (relate.schema.SCENE_GRAPHS_SCHEMA), got {table.column_names}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be at least 1 or None, got {top_k}")
    ids, subj, obj, pred = [], [], [], []
    for image_id, objects, triplets in zip(table.column("image_id").to_pylist(), table.column("objects").to_pylist(),
                                           table.column("triplets").to_pylist()):
        ts = sorted(triplets, key=lambda t: -(t["score"] if t["score"] is not None else -np.inf))
        for t in ts[:top_k] if top_k else ts:
            ends = []
            for role in ("subject", "object"):
                k = t[role]
                if not 0 <= k < len(objects):
                    raise ValueError(f"{name}: image {image_id!r} triplet {role} {k} is not one of its "
                                     f"{len(objects)} objects")
                label = objects[k]["label"]
                if label is None:
                    raise ValueError(f"{name}: image {image_id!r} object {k} has no label; label dependence "
                                     "needs a label on both ends of every triplet")
                ends.append(label)
            ids.append(image_id); subj.append(ends[0]); obj.append(ends[1]); pred.append(t["predicate"])
    return LabelTriplets(np.array(ids, dtype=object), np.array(subj, dtype=object), np.array(obj, dtype=object),
                         np.array(pred, dtype=object))


def majority_table(subject_label: Sequence[str], object_label: Sequence[str],
                   predicate: Sequence[str]) -> dict[LabelPair, str]:
    """Most frequent predicate per (subject label, object label); ties go to the alphabetically first."""
    counts: dict[LabelPair, Counter] = defaultdict(Counter)
    for s, o, p in zip(subject_label, object_label, predicate):
        counts[(s, o)][p] += 1
    return {c: min(cnt, key=lambda p: (-cnt[p], p)) for c, cnt in counts.items()}


def image_halves(image_ids: Sequence[str], seed: int = 0) -> dict[str, int]:
    """A seeded random split of the distinct image ids into halves 0 and 1 (sizes differ by at most 1)."""
    ids = sorted(set(image_ids))
    order = np.random.default_rng(seed).permutation(len(ids))
    return {ids[i]: int(rank % 2) for rank, i in enumerate(order)}


def _cond_entropy(pairs: Sequence[LabelPair], predicate: np.ndarray) -> float:
    by_pair: dict[LabelPair, Counter] = defaultdict(Counter)
    for c, p in zip(pairs, predicate):
        by_pair[c][p] += 1
    n = len(predicate)
    return float(sum(sum(cnt.values()) / n * entropy(np.fromiter(cnt.values(), float)) for cnt in by_pair.values()))


def label_dependence(t: LabelTriplets, *, train_majority: Mapping[LabelPair, str] | None = None,
                     vocabulary_size: int | None = None, halves: Mapping[str, int] | None = None,
                     seed: int = 0) -> LabelDependence:
    """Table 9 for one system's labelled triplets. ``halves`` (image id -> 0 or 1) fixes the
    self-lookup split; by default ``image_halves(seed)``. Needs images in both halves."""
    if len(t) == 0:
        raise ValueError("label dependence needs at least one predicted triplet, got none")
    halves = dict(halves) if halves is not None else image_halves(t.image_id, seed)
    missing = sorted(set(t.image_id) - set(halves))
    if missing:
        raise ValueError(f"halves has no entry for image(s) {missing[:5]}")
    bad = sorted({v for v in halves.values() if v not in (0, 1)})
    if bad:
        raise ValueError(f"halves must map image ids to 0 or 1, got values {bad}")
    side = np.array([halves[i] for i in t.image_id])
    if not (side == 0).any() or not (side == 1).any():
        raise ValueError(f"self-lookup needs images in both halves; all {len(set(t.image_id))} are in one")
    pairs = list(zip(t.subject_label, t.object_label))
    hits = seen = 0
    for fit in (0, 1):
        f, s = side == fit, side != fit
        table = majority_table(t.subject_label[f], t.object_label[f], t.predicate[f])
        for c, p in zip((pairs[i] for i in np.flatnonzero(s)), t.predicate[s]):
            m = table.get(c)
            seen += m is not None
            hits += m == p
    _, counts = np.unique(t.predicate.astype(str), return_counts=True)
    h = float(entropy(counts))
    h_cond = _cond_entropy(pairs, t.predicate)
    agree = None
    if train_majority is not None:
        agree = float(np.mean([train_majority.get(c) == p for c, p in zip(pairs, t.predicate)]))
    return LabelDependence(
        triplets=len(t), images=len(set(t.image_id)), self_lookup=hits / len(t), lookup_coverage=seen / len(t),
        self_lookup_covered=hits / seen if seen else float("nan"),
        cond_entropy=h_cond, entropy=h, entropy_ratio=h_cond / h if h > 0 else float("nan"),
        freq_agreement=agree, distinct_predicates=len(counts), vocabulary_size=vocabulary_size)
