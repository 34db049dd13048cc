"""Corpus statistics shared by the synthetic builder and the annotation pipeline (Table 20 style)."""

from __future__ import annotations

from collections import Counter
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["corpus_statistics", "format_statistics", "entropy_bits"]


def entropy_bits(counts: np.ndarray) -> float:
    p = counts[counts > 0].astype(np.float64)
    p /= p.sum()
    return float(-(p * np.log2(p)).sum()) if p.size else 0.0


def corpus_statistics(table: pa.Table, family_of: Callable[[str], str] | None = None) -> dict:
    """Images, relations, relations per image, distinct predicates, predicate entropy (bits), and
    the share of each predicate family when ``family_of`` maps a surface string to its family."""
    rel = table.column("relations").combine_chunks()
    n_img = table.num_rows
    preds = rel.flatten().field("predicate") if len(rel) else pa.array([], pa.string())
    n_rel = len(preds)
    vc = pc.value_counts(preds).to_pylist() if n_rel else []
    counts = np.array([d["counts"] for d in vc], dtype=np.int64)
    out = {
        "images": n_img,
        "relations": n_rel,
        "relations_per_image": round(n_rel / max(n_img, 1), 3),
        "distinct_predicates": len(vc),
        "predicate_entropy_bits": round(entropy_bits(counts), 3),
    }
    if family_of is not None and n_rel:
        fam = Counter()
        for d in vc:
            fam[family_of(d["values"])] += d["counts"]
        out["family_share"] = {k: round(v / n_rel, 4) for k, v in sorted(fam.items(), key=lambda kv: -kv[1])}
    return out


def format_statistics(stats: dict, title: str = "corpus statistics") -> str:
    """A small aligned text table for terminals and logs."""
    lines = [title]
    for k, v in stats.items():
        if isinstance(v, dict):
            lines.append(f"  {k}:")
            lines += [f"    {kk:<22} {vv:>8.2%}" if isinstance(vv, float) else f"    {kk:<22} {vv}" for kk, vv in v.items()]
        else:
            lines.append(f"  {k:<24} {v}")
    return "\n".join(lines)
