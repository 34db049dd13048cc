"""The training job's recall report (train_jobs.relation_eval._recalls) on a hand-worked split.

One image, ten boxes. Pair (0, 1) carries two true predicates, "left of" and "above" (upper
left). The model scores "left of" 0.9, its synonym "to the left of" 0.85 and "above" 0.7 on that
pair, and "behind" 0.95 on 48 other pairs, which are not true. At K = 50:
- graph-constrained, the pair keeps only its best predicate ("left of"): 1 of 2 found, R@50 0.5;
- unconstrained, each concept at its best form: 48 x behind, left_of, above fill the 50 slots and
  both are found, R@50 1.0. Were the synonyms not collapsed, "to the left of" would take the 50th
  slot from "above" and R@50 would read 0.5 again.
"""

from __future__ import annotations

import numpy as np
import pytest

from relate.metrics._tables import GroundTruth, Predictions
from train_jobs.relation_data import concept_key
from train_jobs.relation_eval import _best_form_per_concept, _recalls

MODE = "synthetic_lexicon"


def _split():
    n = 10
    gt = GroundTruth(image_ids=np.array(["img0"], dtype=object), box_offsets=np.array([0, n]),
                     boxes=np.tile([0.0, 0.0, 10.0, 10.0], (n, 1)), categories=np.array(["thing"] * n, dtype=object),
                     rel_image=np.array([0, 0]), rel_subject=np.array([0, 0]), rel_object=np.array([1, 1]),
                     rel_predicate=np.array([0, 1]), predicates=np.array(["left of", "above"], dtype=object))
    vocab = np.array(["left of", "above", "to the left of", "behind"], dtype=object)
    rows = [(0, 1, 0, 0.9), (0, 1, 2, 0.85), (0, 1, 1, 0.7)]
    others = [(s, o) for s in range(n) for o in range(n) if s != o and (s, o) != (0, 1)][:48]
    rows += [(s, o, 3, 0.95) for s, o in others]
    s, o, p, sc = (np.array(c) for c in zip(*rows))
    preds = Predictions(image=np.zeros(len(rows), dtype=np.int64), subject=s.astype(np.int64),
                        object=o.astype(np.int64), predicate=p.astype(np.int64), score=sc.astype(float), vocab=vocab)
    return gt, preds


def test_one_triplet_per_concept_at_its_best_form():
    _, preds = _split()
    keys = np.array([concept_key(str(v), MODE) for v in preds.vocab], dtype=object)
    out = _best_form_per_concept(preds, keys)
    assert out.n == 50  # 51 triplets, the two left_of forms on pair (0, 1) become one
    on_pair = (out.subject == 0) & (out.object == 1)
    got = {str(out.vocab[p]): float(v) for p, v in zip(out.predicate[on_pair], out.score[on_pair])}
    assert got == {"left_of": 0.9, "above": 0.7}


def test_unconstrained_recall_counts_a_pairs_second_true_predicate():
    gt, preds = _split()
    out = _recalls(gt, preds, MODE, "model/")
    assert out["model/syn/R@50"] == pytest.approx(0.5)
    assert out["model/syn_nogc/R@50"] == pytest.approx(1.0)
    assert out["model/syn_nogc/R@20"] == pytest.approx(0.0)  # the 48 "behind" come first
    assert out["model/syn_nogc/family/spatial@50"] == pytest.approx(1.0)
    assert out["model/syn/family/spatial@50"] == pytest.approx(0.5)
    assert out["model/exact/R@50"] == pytest.approx(0.5)
