"""A family's AP within each kind of pair, by what the annotation said of the pair: where a model
trained on annotation ranks what holds worse than one trained on the truth.

    python -m scripts.ap_by_pair_kind CKPT [CKPT ...] --world /tmp/w12k --annotated /tmp/w12k_annp \\
        --family appearance [--split val] [--images 300]

Every ordered pair of the first ``--images`` images of ``--split`` is put in one kind from the
annotated corpus's row of the same image: ``asked`` (the pairs pass asked every relation of it),
``stated`` (another pass stated something of it, either way round) or ``silent`` (nothing was said of
it). For the family's concepts, each checkpoint's cells (the score ``train_jobs.relation_eval``
ranks by) are scored against the world's truth within each kind and over all: cells, the share that
hold, AP, and the median score of the cells that hold and of those that do not. A model that learnt
which pairs an annotator speaks of ranks the silent pairs' truths low; one that learnt the family
worse is lower in every kind, the asked pairs included, whose labels are complete.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
KINDS = ("asked", "stated", "silent")


def pair_kinds(row: dict) -> dict[tuple[int, int], str]:
    """Ordered pair -> 'asked' or 'stated' from one annotated corpus row (both orders of each pair);
    a pair missing from the result is silent."""
    kind: dict[tuple[int, int], str] = {}
    for r in row.get("relations") or ():
        if r.get("pass") != "pairs":
            kind[(r["subject"], r["object"])] = kind[(r["object"], r["subject"])] = "stated"
    for a in row.get("asked_pairs") or ():
        kind[(a["subject"], a["object"])] = kind[(a["object"], a["subject"])] = "asked"
    return kind


def kind_table(cells: list[tuple[str, float, bool]]) -> dict[str, dict[str, float]]:
    """(kind, score, holds) cells -> per kind and 'all': cells, share holding, AP, median scores."""
    from sklearn.metrics import average_precision_score

    out = {}
    for kind in (*KINDS, "all"):
        sel = [(s, h) for k, s, h in cells if kind in (k, "all")]
        if not sel:
            continue
        sc, lab = np.array([s for s, _ in sel], float), np.array([h for _, h in sel], bool)
        out[kind] = {"cells": len(sel), "share_true": float(lab.mean()),
                     "ap": float(average_precision_score(lab, sc)) if lab.any() else float("nan"),
                     "median_true": float(np.median(sc[lab])) if lab.any() else float("nan"),
                     "median_false": float(np.median(sc[~lab])) if (~lab).any() else float("nan")}
    return out


def main(argv=None) -> dict:
    from relate.api import load_model
    from relate.data.corpus import read_corpus
    from relate.data.lexicon import CONCEPTS
    from relate.data.world_truth import world_truth
    from train_jobs.relation_eval import truth_cells

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoints", nargs="+")
    ap.add_argument("--world", required=True, help="the synthetic world folder (images and truth)")
    ap.add_argument("--annotated", required=True, help="the annotated corpus of the same world (pipelines.annotate)")
    ap.add_argument("--family", required=True, help=f"one of {sorted({c.family for c in CONCEPTS.values()})}")
    ap.add_argument("--split", default="val")
    ap.add_argument("--images", type=int, default=300, help="the split's first N images")
    args = ap.parse_args(argv)
    concepts = [c for c, k in CONCEPTS.items() if k.family == args.family]
    if not concepts:
        ap.error(f"--family {args.family!r} has no concepts")
    world = read_corpus(args.world, args.split).slice(0, args.images)
    rows = {r["image_id"]: r for r in read_corpus(args.annotated, args.split)
            .select(["image_id", "relations", "asked_pairs"]).to_pylist()}
    ids = world.column("image_id").to_pylist()
    missing = [i for i in ids if i not in rows]
    if missing:  # before any image is scored
        ap.error(f"{len(missing)} image(s) of {args.world} {args.split} have no row in {args.annotated}, e.g. {missing[:3]}")
    truth = world_truth(args.world, ids, world.column("boxes").to_pylist())
    result = {}
    for ck in args.checkpoints:
        model = load_model(ck)
        scores = model.score_images(world.column("uri").to_pylist(), world.column("boxes").to_pylist())
        cells, names = truth_cells(model, scores, list(model.vocabulary_strings(None)), truth, "synthetic_lexicon")
        cols = [names.index(c) for c in concepts]
        flat = []
        for img, c in zip(ids, cells):
            kinds = pair_kinds(rows[img])
            for p, (s, o) in enumerate(c.pairs):
                k = kinds.get((int(s), int(o)), "silent")
                flat += [(k, float(c.scores[p, j]), (int(s), int(o), con) in c.truth) for j, con in zip(cols, concepts)]
        result[ck] = kind_table(flat)
        print(f"{ck}\n| kind | cells | share true | AP | median score, true | median score, false |\n|---|---:|---:|---:|---:|---:|")
        for kind, v in result[ck].items():
            print(f"| {kind} | {v['cells']} | {v['share_true']:.3f} | {v['ap']:.3f} | {v['median_true']:.2f} | "
                  f"{v['median_false']:.2f} |", flush=True)
    return result


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main()
