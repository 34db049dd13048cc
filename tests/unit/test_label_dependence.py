"""Label dependence (Table 9) on predictions whose answers are worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from relate.metrics.label_dependence import label_dependence, label_triplets, majority_table
from relate.schema import SCENE_GRAPHS_SCHEMA


def _table(images: dict[str, list[tuple[str, str, str]]]) -> pa.Table:
    """Objects-layout predictions: per image, one (subject label, object label, predicate) per triplet."""
    rows = []
    for image_id, trips in images.items():
        objects, triplets = [], []
        for k, (s, o, p) in enumerate(trips):
            objects += [dict(x1=0.0, y1=0.0, x2=1.0, y2=1.0, label=s, score=1.0),
                        dict(x1=0.0, y1=0.0, x2=1.0, y2=1.0, label=o, score=1.0)]
            triplets.append(dict(subject=2 * k, object=2 * k + 1, predicate=p, score=1.0 - 0.01 * k,
                                 spatial_score=None, semantic_score=None))
        rows.append(dict(image_id=image_id, objects=objects, pairs=[], pair_scores=[], triplets=triplets))
    return pa.Table.from_pylist(rows, schema=SCENE_GRAPHS_SCHEMA)


def test_a_pure_label_lookup_is_fully_self_reproduced_and_leaves_no_entropy():
    rule = {("person", "cup"): "holding", ("cup", "table"): "on", ("person", "chair"): "sitting on"}
    rng = np.random.default_rng(0)
    keys = list(rule)
    images = {f"img{i}": [(*keys[j], rule[keys[j]]) for j in rng.integers(0, 3, size=4)] for i in range(40)}
    r = label_dependence(label_triplets(_table(images)), train_majority=rule, vocabulary_size=5)
    assert r.self_lookup == 1.0 and r.lookup_coverage == 1.0 and r.self_lookup_covered == 1.0
    assert r.cond_entropy == pytest.approx(0.0, abs=1e-12) and r.entropy_ratio == pytest.approx(0.0, abs=1e-12)
    assert r.entropy > 1.0 and r.freq_agreement == 1.0 and r.distinct_predicates == 3
    # the same labels with the predicate drawn at random are no lookup
    noisy = {i: [(s, o, str(rng.choice(["a", "b", "c"]))) for s, o, _ in t] for i, t in images.items()}
    n = label_dependence(label_triplets(_table(noisy)), train_majority=rule)
    assert n.self_lookup < 0.6 and n.cond_entropy > 0.8 and n.freq_agreement == 0.0


def test_hand_worked_halves_entropies_and_majorities():
    """Half 0 = images a, b; half 1 = c, d. Pair (A, B): half 0 says x, x, y; half 1 says x, y.
    Pair (C, D): half 0 says z; half 1 says z, w. Pair (E, F) only in half 1, saying q.
    Table of half 0: AB->x, CD->z; of half 1: AB->x (x/y tie, alphabetical), CD->w (w/z tie).
    Half 1 scored by half 0's table: x hit, y miss, z hit, w miss, q unseen -> 2 of 5.
    Half 0 scored by half 1's table: x, x hits, y miss, z miss -> 2 of 4. Self-lookup 4 / 9,
    coverage 8 / 9. H(p|c) = 5/9 H(3/5, 2/5) + 3/9 H(2/3, 1/3) + 1/9 * 0; H(p) over (3, 2, 2, 1, 1)/9."""
    images = {"a": [("A", "B", "x"), ("A", "B", "y")], "b": [("A", "B", "x"), ("C", "D", "z")],
              "c": [("A", "B", "x"), ("C", "D", "z")], "d": [("A", "B", "y"), ("C", "D", "w"), ("E", "F", "q")]}
    t = label_triplets(_table(images))
    train = {("A", "B"): "y", ("C", "D"): "z"}
    r = label_dependence(t, halves={"a": 0, "b": 0, "c": 1, "d": 1}, train_majority=train, vocabulary_size=6)
    h = lambda *p: -sum(q * math.log(q) for q in p)  # noqa: E731
    assert r.self_lookup == pytest.approx(4 / 9) and r.lookup_coverage == pytest.approx(8 / 9)
    assert r.self_lookup_covered == pytest.approx(4 / 8)
    want_cond = 5 / 9 * h(3 / 5, 2 / 5) + 3 / 9 * h(2 / 3, 1 / 3)
    want_h = h(3 / 9, 2 / 9, 2 / 9, 1 / 9, 1 / 9)
    assert r.cond_entropy == pytest.approx(want_cond) and r.entropy == pytest.approx(want_h)
    assert r.entropy_ratio == pytest.approx(want_cond / want_h)
    assert r.freq_agreement == pytest.approx(4 / 9)  # y twice on AB, z twice on CD
    assert (r.distinct_predicates, r.triplets, r.images, r.vocabulary_size) == (5, 9, 4, 6)
    assert majority_table(["A", "A", "A"], ["B", "B", "B"], ["y", "x", "y"]) == {("A", "B"): "y"}


def test_top_k_keeps_the_highest_scored_triplets_per_image():
    t = label_triplets(_table({"a": [("A", "B", "first"), ("A", "B", "second"), ("A", "B", "third")]}), top_k=2)
    assert list(t.predicate) == ["first", "second"]


def test_bad_input_names_what_is_wrong():
    tab = _table({"a": [("A", "B", "x")], "b": [("A", "B", "x")]})
    objs = tab.column("objects").to_pylist()
    objs[1][0]["label"] = None
    with pytest.raises(ValueError, match=r"image 'b' object 0 has no label"):
        label_triplets(tab.set_column(1, "objects", pa.array(objs, type=tab.schema.field("objects").type)))
    with pytest.raises(ValueError, match="column 'objects' missing"):
        label_triplets(tab.drop(["objects"]))
    t = label_triplets(tab)
    with pytest.raises(ValueError, match="both halves"):
        label_dependence(t, halves={"a": 0, "b": 0})
    with pytest.raises(ValueError, match=r"no entry for image\(s\) \['b'\]"):
        label_dependence(t, halves={"a": 0})
