"""One corpus-statistics definition (relate.corpus_stats): Table 20's units and denominators."""

from __future__ import annotations

import math

import pyarrow as pa

from relate.annotation_stats import corpus_table20
from relate.corpus_stats import corpus_statistics, entropy_nats, format_statistics


def _r(s, o, p, pass_="semantic"):
    return {"subject": s, "object": o, "predicate": p, "pass": pass_}


TABLE = pa.Table.from_pylist([
    {"relations": [_r(0, 1, "on"), _r(1, 2, "near", "spatial")]},   # one component over boxes 0-1-2
    {"relations": [_r(0, 1, "on"), _r(2, 3, "holding")]},           # two components
    {"relations": []},                                              # no relations: still an image
    {"relations": [_r(0, 1, "on")]},
])


def test_table20_definitions():
    st = corpus_statistics(TABLE, family_of=lambda p: "contact" if p == "on" else "other")
    assert st["images"] == 4 and st["images_with_relations"] == 3 and st["relations"] == 5
    assert st["relations_per_image"] == 5 / 4               # over all images, as Table 20 (9.03 for RA-4M)
    assert st["distinct_predicates"] == 3
    want = -sum(p * math.log(p) for p in (3 / 5, 1 / 5, 1 / 5))   # nats
    assert abs(st["predicate_entropy_nats"] - want) < 1e-12
    assert abs(st["mean_object_degree"] - (1 + 2 + 1 + 1 + 1 + 1 + 1 + 1 + 1) / 9) < 1e-12
    assert st["single_component_share"] == 2 / 3
    assert st["pass_share"] == {"semantic": 4 / 5, "spatial": 1 / 5}
    assert st["family_share"] == {"contact": 3 / 5, "other": 2 / 5}
    assert "relations_per_image" in format_statistics(st)


def test_annotation_statistics_use_the_same_definition():
    assert corpus_table20(TABLE) == corpus_statistics(TABLE)


def test_entropy_is_in_nats():
    assert abs(entropy_nats([1, 1]) - math.log(2)) < 1e-12 and entropy_nats([]) == 0.0 and entropy_nats([0, 5]) == 0.0
