"""Estimate P(q | p): how likely predicate q also holds when p is annotated (Eq. 3, § 3.3).

Fitted on box pairs that carry more than one annotation. Each candidate cell (p, q) is described
by its co-annotation rate, the text cosine of the two strings and q's frequency; a logistic model
of "q is also stated" is a classifier of labelled-vs-unlabelled, and the Elkan-Noto correction
divides it by c = mean score over labelled positives, turning P(stated) into P(true) because an
unstated predicate is unlabelled rather than false. Saved as a scipy sparse matrix (.npz) with
the strings in a JSON sidecar.

    python -m train_jobs.cooccurrence --set corpus_root=/tmp/synth --set out_path=/tmp/cooc.npz
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import scipy.sparse as sp
from pydantic import Field

from relate.config import StrictConfig, parse_job_args
from relate.storage import Location

__all__ = ["CooccurrenceConfig", "CooccurrenceResult", "multi_annotated_sets", "estimate_cooccurrence",
           "count_on_asked_pairs", "has_asked_pairs", "save_cooccurrence", "load_cooccurrence", "main"]


class CooccurrenceConfig(StrictConfig):
    corpus_root: Location = Field("runs/synthetic", description="folder holding corpus/<split>/*.parquet")
    split: str = Field("train", description="corpus split to count on")
    encoder: str = Field("minilm", description="text encoder for the cosine feature (relate.text registry)")
    neighbours: int = Field(10, ge=0, description="text neighbours of p added as candidate cells besides co-annotated ones")
    cap: float = Field(0.95, gt=0, lt=1, description="largest P(q|p) stored (keeps log(1 - P) finite)")
    out_path: Location = Field("runs/cooccurrence.npz", description="output .npz (strings go to <out>.strings.json)")


@dataclass
class CooccurrenceResult:
    path: str
    strings: list[str]
    nnz: int
    label_frequency_c: float
    multi_pairs: int


def multi_annotated_sets(table) -> list[set[str]]:
    """Predicate sets of every box pair carrying two or more distinct predicates."""
    out = []
    for rels in table.column("relations").to_pylist():
        by_pair: dict[tuple[int, int], set[str]] = {}
        for r in rels:
            by_pair.setdefault((r["subject"], r["object"]), set()).add(r["predicate"])
        out += [s for s in by_pair.values() if len(s) > 1]
    return out


def has_asked_pairs(table) -> bool:
    """Whether any image of ``table`` has pairs a pass asked every relation of (the pairs pass)."""
    return "asked_pairs" in table.column_names and table.column("asked_pairs").null_count < table.num_rows


def count_on_asked_pairs(table, strings: Sequence[str], group_of, cap: float = 0.95, min_count: int = 5
                         ) -> tuple[np.ndarray, np.ndarray, int]:
    """P(q | p) counted where it can be: on the pairs the pairs pass asked every relation of.

    On such a pair what holds is known (everything stated there by any pass, with what it implies:
    relate.entailment), and what the other passes said of it is known too, so P(q | p) is the share of
    the ordered pairs the other passes stated p of (or that p follows from) on which q holds: a count,
    not a guess from text neighbours or an Elkan-Noto correction. Also returned: P(q | nothing stated),
    the same share over asked pairs the other passes said nothing of, and the number of asked ordered
    pairs. Counted per synonym group (``group_of``: string -> group key) and spread over the group's
    strings; a p stated on fewer than ``min_count`` asked pairs gets no estimate (0: no discount).
    """
    from relate.entailment import implied_relations
    from relate.predicate_knowledge import load_predicate_knowledge

    knowledge = load_predicate_knowledge()
    first = {}
    for st in strings:
        first.setdefault(group_of(st), st)

    def closed(rels: list[tuple[int, int, str]]) -> dict[tuple[int, int], set[str]]:
        out: dict[tuple[int, int], set[str]] = {}
        for s, o, f in list(rels) + implied_relations(rels, group_of, lambda g, pref: pref or first.get(g) or
                                                      (knowledge.groups[g].forms[0] if g in knowledge.groups else None)):
            out.setdefault((s, o), set()).add(group_of(f))
        return out

    groups = sorted({group_of(x) for x in strings})
    gi = {g: i for i, g in enumerate(groups)}
    co = np.zeros((len(groups), len(groups)))
    n = np.zeros(len(groups))
    empty, n_empty, n_pairs = np.zeros(len(groups)), 0, 0
    for rels, asked in zip(table.column("relations").to_pylist(), table.column("asked_pairs").to_pylist()):
        if not asked:
            continue
        triples = [(r["subject"], r["object"], r["predicate"]) for r in rels]
        holds = closed(triples)
        usual = closed([t for t, r in zip(triples, rels) if r["pass"] != "pairs"])
        for a in asked:
            for s, o in ((a["subject"], a["object"]), (a["object"], a["subject"])):
                n_pairs += 1
                true = [gi[g] for g in holds.get((s, o), ()) if g in gi]
                said = [gi[g] for g in usual.get((s, o), ()) if g in gi]
                if not said:
                    n_empty += 1
                    empty[true] += 1
                for p in said:
                    n[p] += 1
                    co[p, true] += 1
    with np.errstate(invalid="ignore", divide="ignore"):
        pg = np.where(n[:, None] >= min_count, co / np.maximum(n[:, None], 1), 0.0)
    ug = empty / max(n_empty, 1)
    col = np.array([gi[group_of(x)] for x in strings])
    return (np.clip(pg[np.ix_(col, col)], 0, cap).astype(np.float32), np.clip(ug[col], 0, cap).astype(np.float32),
            n_pairs)


def estimate_cooccurrence(sets: Sequence[set[str]], strings: Sequence[str], emb: np.ndarray,
                          neighbours: int = 10, cap: float = 0.95) -> tuple[sp.csr_matrix, float]:
    """(V, V) sparse P[p, q] = P(q | p) and the Elkan-Noto label frequency c."""
    from sklearn.linear_model import LogisticRegression

    index = {s: i for i, s in enumerate(strings)}
    v = len(strings)
    n = np.zeros(v)
    co = Counter()
    for s in sets:
        ids = sorted(index[x] for x in s if x in index)
        n[ids] += 1
        co.update((p, q) for p in ids for q in ids if p != q)
    if not co:
        return sp.csr_matrix((v, v)), float("nan")
    cos = emb @ emb.T
    cells = set(co)
    if neighbours:
        nn = np.argsort(-cos, axis=1)[:, 1: neighbours + 1]
        cells |= {(p, int(q)) for p in np.flatnonzero(n) for q in nn[p] if q != p}
    cells = sorted(cells)
    p_idx, q_idx = np.array([c[0] for c in cells]), np.array([c[1] for c in cells])
    hits = np.array([co.get(c, 0) for c in cells], dtype=float)
    rate = hits / np.maximum(n[p_idx], 1)
    freq = np.log1p(n[q_idx]) / np.log1p(max(n.max(), 1))
    x = np.stack([rate, cos[p_idx, q_idx], freq], axis=1)
    # every candidate cell is a labelled example (weight = hits) and an unlabelled one (n - hits)
    xx = np.concatenate([x, x])
    yy = np.concatenate([np.ones(len(x)), np.zeros(len(x))])
    ww = np.concatenate([hits, np.maximum(n[p_idx] - hits, 0)])
    keep = ww > 0
    if len(np.unique(yy[keep])) < 2:
        return sp.csr_matrix((rate.clip(0, cap), (p_idx, q_idx)), shape=(v, v)), 1.0
    g = LogisticRegression(C=10.0, max_iter=1000).fit(xx[keep], yy[keep], sample_weight=ww[keep])
    score = g.predict_proba(x)[:, 1]
    c = float((score * hits).sum() / hits.sum())  # Elkan-Noto e1: mean g over labelled positives
    prob = np.clip(score / c, 0.0, cap)
    return sp.csr_matrix((prob, (p_idx, q_idx)), shape=(v, v)), c


def save_cooccurrence(path: str | Path, matrix: sp.csr_matrix, strings: Sequence[str]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    sp.save_npz(path, matrix.tocsr())
    Path(str(path) + ".strings.json").write_text(json.dumps(list(strings)))
    return path


def load_cooccurrence(path: str | Path) -> tuple[list[str], sp.csr_matrix]:
    path = Path(path)
    side = Path(str(path) + ".strings.json")
    if not path.is_file() or not side.is_file():
        raise FileNotFoundError(f"co-occurrence estimate needs {path} and {side}")
    strings = json.loads(side.read_text())
    m = sp.load_npz(path).tocsr()
    if m.shape != (len(strings), len(strings)):
        raise ValueError(f"{path}: matrix {m.shape} does not fit {len(strings)} strings")
    return strings, m


def main(cfg: CooccurrenceConfig) -> CooccurrenceResult:
    from relate.data.corpus import read_corpus
    from relate.text.bank import build_bank

    table = read_corpus(cfg.corpus_root, cfg.split)
    strings = sorted({r["predicate"] for rels in table.column("relations").to_pylist() for r in rels})
    sets = multi_annotated_sets(table)
    emb = build_bank(strings, encoder_name=cfg.encoder).matrix
    matrix, c = estimate_cooccurrence(sets, strings, emb, cfg.neighbours, cfg.cap)
    save_cooccurrence(cfg.out_path, matrix, strings)
    print(f"P(q|p): {len(sets)} multiply-annotated pairs, {matrix.nnz} cells, label frequency c={c:.3f} "
          f"-> {cfg.out_path}")
    return CooccurrenceResult(cfg.out_path, strings, int(matrix.nnz), c, len(sets))


if __name__ == "__main__":
    main(parse_job_args(CooccurrenceConfig, sys.argv[1:], description=__doc__ or ""))
