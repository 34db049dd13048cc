"""Systems to judge on the synthetic world, written as prediction tables (PREDICTIONS_SCHEMA).

Until a trained model exists, A5 is exercised on two systems whose quality is known by design:
``noisy_truth`` (the annotation with dropped relations, swapped predicates and scored extra
pairs: informative, imperfect) and ``frequency`` (for every pair, the predicate most often seen
between the two categories in training: the degenerate, repetitive baseline Eq. 4 exists to price).

    python -m relate.judge.synthetic_systems --corpus runs/synthetic --out runs/judge_systems
"""

from __future__ import annotations

import argparse
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from relate.judge.calls import stable_seed
from relate.schema import PREDICTIONS_SCHEMA, to_table

__all__ = ["noisy_truth_predictions", "frequency_predictions", "write_synthetic_systems"]


def _triplet(s: int, o: int, p: str, score: float) -> dict:
    return {"subject": s, "object": o, "predicate": p, "score": score, "spatial_score": score, "semantic_score": score}


def noisy_truth_predictions(corpus: pa.Table, seed: int = 0, keep: float = 0.8, swap: float = 0.2,
                            extra_per_image: int = 3) -> pa.Table:
    """The annotation, degraded: each relation kept with ``keep``, its predicate swapped with ``swap``,
    plus ``extra_per_image`` random pairs with random predicates at lower scores."""
    from relate.data.lexicon import all_surface_forms

    forms = sorted(all_surface_forms())
    rows = []
    for r in corpus.select(["image_id", "boxes", "relations"]).to_pylist():
        rng = np.random.default_rng(stable_seed(seed, "noisy", r["image_id"]))
        tri = []
        for t in r["relations"]:
            if rng.random() >= keep:
                continue
            p = forms[int(rng.integers(len(forms)))] if rng.random() < swap else t["predicate"]
            tri.append(_triplet(t["subject"], t["object"], p, float(rng.uniform(0.5, 1.0))))
        n = len(r["boxes"])
        for _ in range(extra_per_image if n > 1 else 0):
            s, o = rng.choice(n, size=2, replace=False).tolist()
            tri.append(_triplet(s, o, forms[int(rng.integers(len(forms)))], float(rng.uniform(0.0, 0.6))))
        rows.append({"image_id": r["image_id"], "triplets": tri})
    return to_table(rows, PREDICTIONS_SCHEMA, table="noisy_truth")


def frequency_predictions(corpus: pa.Table, train: pa.Table, per_image: int = 20) -> pa.Table:
    """Every ordered pair gets the predicate most frequent between its categories in ``train``."""
    pair_counts: dict[tuple, Counter] = defaultdict(Counter)
    overall: Counter = Counter()
    for r in train.select(["boxes", "relations"]).to_pylist():
        cats = [b["category"] for b in r["boxes"]]
        for t in r["relations"]:
            pair_counts[(cats[t["subject"]], cats[t["object"]])][t["predicate"]] += 1
            overall[t["predicate"]] += 1
    if not overall:
        raise ValueError("frequency baseline: the training table has no relations")
    fallback, n_all = overall.most_common(1)[0]
    rows = []
    for r in corpus.select(["image_id", "boxes"]).to_pylist():
        cats = [b["category"] for b in r["boxes"]]
        tri = []
        for s in range(len(cats)):
            for o in range(len(cats)):
                c = pair_counts.get((cats[s], cats[o]))
                if s == o:
                    continue
                p, k = c.most_common(1)[0] if c else (fallback, n_all)
                tri.append(_triplet(s, o, p, k / (sum(c.values()) if c else sum(overall.values()))))
        tri.sort(key=lambda t: -t["score"])
        rows.append({"image_id": r["image_id"], "triplets": tri[:per_image]})
    return to_table(rows, PREDICTIONS_SCHEMA, table="frequency")


def write_synthetic_systems(corpus_root: str, out_dir: str, split: str = "test", seed: int = 0) -> dict[str, str]:
    """Write ``noisy_truth.parquet`` and ``frequency.parquet`` for ``split``; returns name -> path."""
    from relate.data.corpus import read_corpus

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    corpus, train = read_corpus(corpus_root, split), read_corpus(corpus_root, "train")
    paths = {"noisy_truth": str(out / "noisy_truth.parquet"), "frequency": str(out / "frequency.parquet")}
    pq.write_table(noisy_truth_predictions(corpus, seed), paths["noisy_truth"])
    pq.write_table(frequency_predictions(corpus, train), paths["frequency"])
    return paths


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="write prediction tables of two known-quality synthetic systems")
    ap.add_argument("--corpus", required=True, help="synthetic corpus root")
    ap.add_argument("--out", required=True, help="folder for the Parquet files")
    ap.add_argument("--split", default="test", help="split to predict")
    ap.add_argument("--seed", type=int, default=0, help="noise seed")
    a = ap.parse_args()
    print(write_synthetic_systems(a.corpus, a.out, a.split, a.seed))
