"""How far a passive-voice rule alone could take a text space on the held-out synonym groups.

Table 16's held-out rows (relate.text.heldout) ask for a synonym-vs-inverse AUC of at least 0.97
on inverse groups no loss term has seen. Most held-out inverse pairs are an active form and its
passive ("biting" / "bitten by"); the rest have no such cue ("following" / "leading", "belongs to"
/ "has"). This script prints the encoder's own cosines on the held-out pairs and the AUC it would
reach if every pair with a by-passive side were separated perfectly (cosine -1) and every other
cosine stayed as the encoder has it: an upper bound for any student whose only new skill on
unseen groups is reading the passive. Usage:

    python scripts/text_heldout_ceiling.py [--encoder minilm] [--heldout-fraction 0.25] [--split-seed 0]

``--encoder`` takes any relate.text registry name, e.g. ``student:runs/distill_text/student``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Sequence

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def is_by_passive(a: str, b: str) -> bool:
    """One side of the pair is a passive with its agent after "by" ("worn by", "being used by")."""
    return a.split()[-1] == "by" or b.split()[-1] == "by"


def passive_oracle_auc(syn_cos: Sequence[float], inverse: Sequence[tuple[str, str, float]]) -> tuple[float, float]:
    """(AUC as measured, AUC with every by-passive inverse pair at cosine -1)."""
    from sklearn.metrics import roc_auc_score

    labels = np.r_[np.ones(len(syn_cos)), np.zeros(len(inverse))]
    measured = [c for _, _, c in inverse]
    oracle = [-1.0 if is_by_passive(a, b) else c for a, b, c in inverse]
    return (float(roc_auc_score(labels, np.r_[syn_cos, measured])),
            float(roc_auc_score(labels, np.r_[syn_cos, oracle])))


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--encoder", default="minilm")
    ap.add_argument("--heldout-fraction", type=float, default=0.25)
    ap.add_argument("--split-seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="also write the figures as JSON")
    args = ap.parse_args(argv)

    from relate.text.encoders import load_text_encoder
    from relate.text.heldout import split_inverse_groups

    split = split_inverse_groups(args.heldout_fraction, args.split_seed)
    groups = split.synonym_groups("heldout")
    pairs = split.inverse_pairs("heldout")
    strings = sorted({f for g in groups.values() for f in g} | {s for p in pairs for s in p})
    emb = np.asarray(load_text_encoder(args.encoder).encode(strings), dtype=np.float64)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    row = {s: i for i, s in enumerate(strings)}

    def cos(a: str, b: str) -> float:
        return float(emb[row[a]] @ emb[row[b]])

    syn = [cos(g[i], g[j]) for g in groups.values() for i in range(len(g)) for j in range(i + 1, len(g))]
    inverse = [(a, b, cos(a, b)) for a, b in pairs]
    measured, oracle = passive_oracle_auc(syn, inverse)
    out = {"encoder": args.encoder, "heldout_groups": sorted(split.heldout_groups), "synonym_pairs": len(syn),
           "inverse_pairs": len(inverse), "by_passive_pairs": sum(is_by_passive(a, b) for a, b, _ in inverse),
           "syn_cos": float(np.mean(syn)), "auc": measured, "auc_passive_oracle": oracle}
    print(f"{args.encoder}: {len(inverse)} held-out inverse pairs ({out['by_passive_pairs']} by-passive), "
          f"{len(syn)} synonym pairs, mean synonym cosine {out['syn_cos']:.3f}")
    print(f"AUC {measured:.3f}; with every by-passive pair at cosine -1: {oracle:.3f} (bar 0.97)")
    for a, b, c in sorted(inverse, key=lambda t: -t[2]):
        print(f"  {c:+.2f}  {a} / {b}{'' if is_by_passive(a, b) else '   (no passive cue)'}")
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
