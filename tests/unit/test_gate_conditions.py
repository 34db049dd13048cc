"""relate.gate's conditions as labels: on every ordered pair, a relation is ruled out by the boxes
exactly when Algorithm 1 (``gate_relations``, the gate as the pipeline runs it) rejects or repairs it."""

from __future__ import annotations

import numpy as np
import pytest

from relate.gate import (CONDITIONS, SWAPPED, BoxTable, Candidates, GateConfig, condition_columns, gate_relations,
                         pair_conditions)

pytestmark = pytest.mark.unit

SPATIAL = ["left of", "to the right of", "above", "below", "on top of", "near", "next to", "inside", "contains",
           "on", "touching", "leaning against", "in front of", "behind"]
# the semantic passes check only that contact and containment boxes meet; a layout form's conditions are
# those of the spatial pass, which checks all of its geometry (a semantic "inside" is held to line 8 too)
SEMANTIC = ["holding", "wearing", "riding", "looking at"]


def _boxes(rng, n):
    xy = rng.uniform(0, 80, size=(n, 2))
    wh = rng.uniform(4, 40, size=(n, 2))
    b = np.concatenate([xy, xy + wh], axis=1)
    b[1] = [b[0, 2], b[0, 1], b[0, 2] + 10, b[0, 1] + 10]  # box 1 meets box 0 exactly at an edge
    b[2] = [b[0, 0] + 1, b[0, 1] + 1, b[0, 0] + 5, b[0, 1] + 5]  # box 2 inside box 0
    return b


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ruled_out_is_what_algorithm_1_rejects_or_repairs(seed):
    rng = np.random.default_rng(seed)
    boxes = _boxes(rng, 7)
    n = len(boxes)
    holds = pair_conditions(boxes)
    for passes, preds in (("spatial", SPATIAL), ("semantic", SEMANTIC)):
        needs = condition_columns(preds)
        s, o = np.nonzero(~np.eye(n, dtype=bool))
        for v, p in enumerate(preds):
            bt = BoxTable.from_images(["img"], [[dict(x1=x1, y1=y1, x2=x2, y2=y2) for x1, y1, x2, y2 in boxes]])
            c = Candidates.from_lists(np.zeros(len(s), int), s, o, [p] * len(s), [passes] * len(s))
            res = gate_relations(bt, c, GateConfig(balance=False, dedup=False))
            gate_says = (res.outcome == SWAPPED) | ~res.accepted
            ours = (needs[v][None] & ~holds[s, o]).any(axis=1)
            assert (ours == gate_says).all(), (p, passes, np.flatnonzero(ours != gate_says))


def test_conditions_worked_by_hand():
    # a at the left, b meeting a's right edge, c far to the right and lower, d inside a
    boxes = np.array([[0, 0, 10, 10], [10, 2, 14, 6], [60, 40, 70, 50], [2, 2, 5, 5]], float)
    h = pair_conditions(boxes)
    col = {c: i for i, c in enumerate(CONDITIONS)}
    assert h[0, 1, col["meet"]] and h[0, 1, col["close"]] and h[0, 1, col["subject_left"]]
    assert not h[1, 0, col["subject_left"]] and h[1, 0, col["subject_right"]]
    assert not h[0, 2, col["meet"]] and not h[0, 2, col["close"]] and h[0, 2, col["subject_above"]]
    assert h[3, 0, col["subject_within"]] and not h[0, 3, col["subject_within"]] and h[0, 3, col["object_within"]]
    needs = condition_columns(["left of", "contains", "near", "holding", "brighter than"])
    assert needs[0, col["subject_left"]] and needs[0].sum() == 1
    assert needs[1, col["meet"]] and needs[1, col["object_within"]] and needs[1].sum() == 2
    assert needs[2, col["close"]] and needs[3, col["meet"]] and not needs[4].any()
