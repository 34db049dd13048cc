"""Corpus statistics in the style of seed 001, Table 20: the one definition every job prints.

Used by the synthetic-world builder and the annotation pipeline alike. Definitions:

* ``relations_per_image``: relations over *all* images of the table, as Table 20 (RA-4M:
  4,282,531 / 474,413 = 9.03); images without relations count.
* ``predicate_entropy_nats``: Shannon entropy of the predicate-string distribution in nats
  (natural log), as Table 20 and §4.2 (RA-4M: 3.99).
* ``mean_object_degree``: relations touching a box, averaged over the boxes that take part in
  at least one relation (§4.2: 3.20 for RA-4M).
* ``single_component_share``: among images with at least one relation, the share whose relation
  graph (boxes in a relation, undirected) is one connected component (§4.2: 82.6%).
* ``pass_share``: share of relations per annotation pass, when relations carry a ``pass`` field.
* ``family_share``: share of relations per predicate family, when ``family_of`` is given.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable

import numpy as np
import pyarrow as pa

__all__ = ["corpus_statistics", "CorpusTally", "format_statistics", "entropy_nats"]


def entropy_nats(counts: np.ndarray) -> float:
    """Entropy in nats of the distribution proportional to ``counts`` (zeros ignored)."""
    p = np.asarray(counts, np.float64)
    p = p[p > 0]
    if p.size == 0:
        return 0.0
    p /= p.sum()
    return float(-(p * np.log(p)).sum())


def _components(n_nodes: int, edges: list[tuple[int, int]]) -> int:
    parent = list(range(n_nodes))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x
    for a, b in edges:
        parent[find(a)] = find(b)
    return len({find(i) for i in range(n_nodes)})


class CorpusTally:
    """:func:`corpus_statistics` of a corpus read a table (a shard) at a time: every figure is a
    ratio of counts summed over images, so the tally keeps counts and never rows."""

    def __init__(self) -> None:
        self.images = self.with_relations = self.single = self.degree_sum = self.degree_n = 0
        self.predicates: Counter = Counter()
        self.passes: Counter = Counter()

    def add(self, table: pa.Table) -> "CorpusTally":
        self.images += int(table.num_rows)
        for rs in table.column("relations").to_pylist() if table.num_rows else []:
            if not rs:
                continue
            self.with_relations += 1
            deg: Counter = Counter()
            for r in rs:
                self.predicates[r["predicate"]] += 1
                if r.get("pass") is not None:
                    self.passes[r["pass"]] += 1
                deg[r["subject"]] += 1
                deg[r["object"]] += 1
            self.degree_sum += sum(deg.values())
            self.degree_n += len(deg)
            pos = {n: i for i, n in enumerate(deg)}
            self.single += _components(len(pos), [(pos[r["subject"]], pos[r["object"]]) for r in rs]) == 1
        return self

    def statistics(self, family_of: Callable[[str], str] | None = None) -> dict:
        n_img, n_rel = self.images, sum(self.predicates.values())
        out = {
            "images": n_img,
            "images_with_relations": self.with_relations,
            "relations": n_rel,
            "relations_per_image": n_rel / max(n_img, 1),
            "distinct_predicates": len(self.predicates),
            "predicate_entropy_nats": entropy_nats(np.array(list(self.predicates.values()))),
            "mean_object_degree": self.degree_sum / self.degree_n if self.degree_n else 0.0,
            "single_component_share": self.single / max(self.with_relations, 1),
        }
        if self.passes:
            out["pass_share"] = {k: v / n_rel for k, v in sorted(self.passes.items())}
        if family_of is not None and n_rel:
            fam: Counter = Counter()
            for p, v in self.predicates.items():
                fam[family_of(p)] += v
            out["family_share"] = {k: v / n_rel for k, v in sorted(fam.items(), key=lambda kv: -kv[1])}
        return out


def corpus_statistics(table: pa.Table, family_of: Callable[[str], str] | None = None) -> dict:
    """The Table-20 columns plus degree, connectivity, pass and family shares of a corpus table
    (any table with a ``relations`` list column of {subject, object, predicate[, pass]})."""
    return CorpusTally().add(table).statistics(family_of)


def format_statistics(stats: dict, title: str = "corpus statistics") -> str:
    """A small aligned text table for terminals and logs (shares as percentages)."""
    lines = [title]
    for k, v in stats.items():
        if isinstance(v, dict):
            lines.append(f"  {k}:")
            lines += [f"    {kk:<22} {vv:>8.2%}" if isinstance(vv, float) else f"    {kk:<22} {vv}" for kk, vv in v.items()]
        elif isinstance(v, float):
            lines.append(f"  {k:<24} {v:.3f}")
        else:
            lines.append(f"  {k:<24} {v}")
    return "\n".join(lines)
