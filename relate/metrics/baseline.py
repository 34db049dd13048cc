"""The frequency baseline [Zellers et al., 2018] measured in seed 001, 5.2 (Tab. 1).

It sees no pixels: from a training corpus it counts predicates per <subject category, object
category> pair and, for a test pair, returns those predicates scored by their conditional
frequency (the global predicate marginal when the category pair was never seen). It needs the
ground-truth categories, which is exactly the prior a label-conditioned model gets for free.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from relate.metrics._tables import GroundTruth
from relate.metrics.mass import relation_triples
from relate.schema import PREDICTIONS_SCHEMA, TRIPLET_TYPE

__all__ = ["FrequencyBaseline", "fit_frequency_baseline"]


@dataclass(frozen=True)
class FrequencyBaseline:
    """Top-k predicates and their conditional frequencies per category pair."""

    pair_keys: np.ndarray      # (P,) "subject\x1fobject" category keys, sorted
    top_pred: np.ndarray       # (P + 1, k) predicate strings; the last row is the marginal
    top_score: np.ndarray      # (P + 1, k) conditional frequencies (0 where padded)

    @property
    def k(self) -> int:
        return int(self.top_pred.shape[1])

    def _rows(self, subj: np.ndarray, obj: np.ndarray) -> np.ndarray:
        keys = np.array([f"{str(s).lower()}\x1f{str(o).lower()}" for s, o in zip(subj, obj)], dtype=object).astype(str)
        pos = np.searchsorted(self.pair_keys, keys)
        pos_c = np.minimum(pos, max(self.pair_keys.size - 1, 0))
        found = (self.pair_keys.size > 0) & (self.pair_keys[pos_c] == keys) if keys.size else np.zeros(0, bool)
        return np.where(found, pos_c, self.pair_keys.size)

    def predict(self, gt: GroundTruth, *, pairs: str = "annotated") -> pa.Table:
        """PREDICTIONS_SCHEMA table over ``gt``'s images: ``annotated`` scores the GT pairs only
        (predicate classification), ``all`` every ordered pair of GT boxes."""
        if pairs == "annotated":
            key = np.unique(np.stack([gt.rel_image, gt.rel_subject, gt.rel_object], 1), axis=0)
            img, s, o = key[:, 0], key[:, 1], key[:, 2]
        elif pairs == "all":
            nb = gt.n_boxes
            cnt = nb * nb
            img = np.repeat(np.arange(gt.n_images), cnt)
            t = np.arange(img.size) - np.repeat(np.cumsum(cnt) - cnt, cnt)
            s, o = t // np.maximum(nb[img], 1), t % np.maximum(nb[img], 1)
            keep = s != o
            img, s, o = img[keep], s[keep], o[keep]
        else:
            raise ValueError(f"pairs must be 'annotated' or 'all', got {pairs!r}")
        cats = gt.categories
        rows = self._rows(cats[gt.box_offsets[img] + s], cats[gt.box_offsets[img] + o])
        preds, scores = self.top_pred[rows], self.top_score[rows]
        valid = scores > 0
        n_per = valid.sum(1)
        flat_img = np.repeat(img, n_per)
        fields = [pa.array(np.repeat(s, n_per).astype(np.int32)), pa.array(np.repeat(o, n_per).astype(np.int32)),
                  pa.array(preds[valid].astype(str)), pa.array(scores[valid].astype(np.float32)),
                  pa.nulls(int(valid.sum()), pa.float32()), pa.nulls(int(valid.sum()), pa.float32())]
        structs = pa.StructArray.from_arrays(fields, fields=list(TRIPLET_TYPE))
        counts = np.bincount(flat_img, minlength=gt.n_images)
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
        lists = pa.ListArray.from_arrays(pa.array(offsets), structs, type=pa.list_(TRIPLET_TYPE))
        return pa.Table.from_arrays([pa.array(gt.image_ids.astype(str)), lists], schema=PREDICTIONS_SCHEMA)


def _top(keys: np.ndarray, preds: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    uk, kinv = np.unique(keys, return_inverse=True)
    up, pinv = np.unique(preds, return_inverse=True)
    counts = np.zeros((uk.size, up.size))
    np.add.at(counts, (kinv, pinv), 1.0)
    freq = counts / counts.sum(1, keepdims=True)
    order = np.argsort(-freq, axis=1, kind="stable")[:, :k]
    top_s = np.take_along_axis(freq, order, 1)
    top_p = up[order]
    if top_p.shape[1] < k:
        pad = k - top_p.shape[1]
        top_p = np.pad(top_p.astype(object), ((0, 0), (0, pad)), constant_values="")
        top_s = np.pad(top_s, ((0, 0), (0, pad)))
    return uk, top_p.astype(object), top_s


def fit_frequency_baseline(train: pa.Table, *, k: int = 5) -> FrequencyBaseline:
    """Count predicates per category pair in a CORPUS_SCHEMA table; keep the ``k`` most frequent."""
    s, p, o = relation_triples(train)
    ok = (s != None) & (o != None) & (p != None)  # noqa: E711
    if not ok.any():
        raise ValueError("frequency baseline: the training corpus has no relation with both categories")
    keys = np.array([f"{a}\x1f{b}" for a, b in zip(s[ok], o[ok])], dtype=object).astype(str)
    preds = p[ok].astype(str)
    uk, tp, ts = _top(keys, preds, k)
    _, mp, ms = _top(np.zeros(preds.size, dtype=str), preds, k)
    return FrequencyBaseline(uk, np.concatenate([tp, mp]), np.concatenate([ts, ms]))
