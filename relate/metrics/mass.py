"""Shared triplet mass (seed 001, 5.2, Tab. 17/18): how much of a training corpus's relation mass
a benchmark also annotates, on the predicate, on the object-category pair and on the full
<subject category, predicate, object category> triple. It predicts recall on that benchmark, so
it is printed beside every A1 cell."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["relation_triples", "shared_triplet_mass"]


def _norm(values: np.ndarray) -> np.ndarray:
    out = np.array([None if v is None else " ".join(str(v).lower().split()) for v in values], dtype=object)
    return out


def relation_triples(table: pa.Table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(subject category, predicate, object category) per relation, lower-cased, None if unknown."""
    boxes = table.column("boxes").combine_chunks()
    offsets = boxes.offsets.to_numpy().astype(np.int64)
    offsets -= offsets[0]
    cats = boxes.flatten().field("category").to_numpy(zero_copy_only=False) if len(boxes.flatten()) else np.zeros(0, object)
    rel_col = table.column("relations").combine_chunks()
    img = pc.list_parent_indices(rel_col).to_numpy().astype(np.int64)
    rel = rel_col.flatten()
    if len(rel) == 0:
        e = np.zeros(0, dtype=object)
        return e, e, e
    s = rel.field("subject").to_numpy(zero_copy_only=False).astype(np.int64)
    o = rel.field("object").to_numpy(zero_copy_only=False).astype(np.int64)
    pred = rel.field("predicate").to_numpy(zero_copy_only=False)
    cats = _norm(cats)
    return cats[offsets[img] + s], _norm(pred), cats[offsets[img] + o]


def _keys(*cols: np.ndarray) -> np.ndarray:
    ok = np.ones(cols[0].size, bool)
    for c in cols:
        ok &= c != None  # noqa: E711
    out = np.full(cols[0].size, None, dtype=object)
    out[ok] = ["\x1f".join(t) for t in zip(*(c[ok] for c in cols))]
    return out


def shared_triplet_mass(train: pa.Table, benchmark: pa.Table) -> dict[str, float]:
    """Fractions of ``train`` relation instances whose predicate / category pair / triple the
    benchmark also annotates. A relation with an unknown category can share only its predicate."""
    ts, tp, to = relation_triples(train)
    bs, bp, bo = relation_triples(benchmark)
    n = tp.size
    if n == 0:
        return {"pred": float("nan"), "obj": float("nan"), "triple": float("nan"), "n_relations": 0.0}
    out = {}
    for name, tk, bk in (("pred", _keys(tp), _keys(bp)), ("obj", _keys(ts, to), _keys(bs, bo)),
                         ("triple", _keys(ts, tp, to), _keys(bs, bp, bo))):
        bset = np.unique(bk[bk != None].astype(str)) if (bk != None).any() else np.zeros(0, str)  # noqa: E711
        valid = tk != None  # noqa: E711
        shared = np.zeros(n, bool)
        shared[valid] = np.isin(tk[valid].astype(str), bset)
        out[name] = float(shared.mean())
    out["n_relations"] = float(n)
    return out
