"""P(q|p) as the Eq. 3 estimate has it (fitted on a corpus's multiply-annotated pairs) against the
synthetic world's truth (over every ordered pair of the same training images where p holds, the
share where q holds too).

    python scripts/cooccurrence_vs_truth.py --corpus runs/demo/annotated --world runs/demo/synthetic

Concepts are compared at their best surface form (the estimate is per string).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PAIRS = (("near", "left_of"), ("near", "above"), ("touching", "on"), ("touching", "holding"),
         ("brighter_than", "left_of"), ("darker_than", "above"))


def main(argv=None) -> dict:
    from relate.data.corpus import read_corpus
    from relate.data.lexicon import CONCEPTS, SURFACE_TO_CONCEPT
    from relate.data.world_truth import world_truth
    from relate.text.bank import build_bank
    from train_jobs.cooccurrence import CooccurrenceConfig, estimate_cooccurrence, multi_annotated_sets

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--corpus", required=True, help="annotated corpus root (its train split is estimated from)")
    ap.add_argument("--world", required=True, help="the synthetic world folder the corpus was drawn from")
    args = ap.parse_args(argv)
    train = read_corpus(args.corpus, "train")
    strings = [f for c in CONCEPTS.values() for f in c.forms]
    est = CooccurrenceConfig.model_construct()
    sets = multi_annotated_sets(train)
    matrix, c = estimate_cooccurrence(sets, strings, build_bank(strings).matrix, est.neighbours, est.cap)
    m = matrix.toarray()
    count, co = Counter(), Counter()
    for truth, _ in world_truth(args.world, train.column("image_id").to_pylist(), train.column("boxes").to_pylist()):
        by_pair: dict[tuple[int, int], set[str]] = {}
        for s, o, concept in truth:
            by_pair.setdefault((s, o), set()).add(concept)
        for cs in by_pair.values():
            for p in cs:
                count[p] += 1
                co.update((q, p) for q in cs if q != p)
    print(f"{len(sets)} multiply-annotated pairs, label frequency c={c:.3f}")
    out = {}
    for q, p in PAIRS:
        rows = [i for i, s in enumerate(strings) if SURFACE_TO_CONCEPT[s] == p]
        cols = [i for i, s in enumerate(strings) if SURFACE_TO_CONCEPT[s] == q]
        estimate = float(m[rows][:, cols].max())
        true = co[(q, p)] / max(count[p], 1)
        out[f"{q}|{p}"] = (estimate, true)
        print(f"P({q} | {p}): estimate {estimate:.3f}, truth {true:.3f}")
    return out


if __name__ == "__main__":
    main()
