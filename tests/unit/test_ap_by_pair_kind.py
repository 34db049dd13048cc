"""scripts.ap_by_pair_kind's pair kinds and per-kind table, worked by hand."""

import math

from scripts.ap_by_pair_kind import kind_table, pair_kinds


def test_pair_kinds_take_both_orders_and_asked_wins():
    row = {"relations": [{"subject": 0, "object": 1, "pass": "spatial"},
                         {"subject": 2, "object": 0, "pass": "pairs"},   # the pairs pass's own statement
                         {"subject": 1, "object": 2, "pass": "contact"}],
           "asked_pairs": [{"subject": 0, "object": 2}, {"subject": 2, "object": 1}]}
    kinds = pair_kinds(row)
    assert kinds[(0, 1)] == kinds[(1, 0)] == "stated"
    assert kinds[(0, 2)] == kinds[(2, 0)] == "asked"
    assert kinds[(1, 2)] == kinds[(2, 1)] == "asked"  # stated by a pass and asked: asked
    assert (0, 3) not in kinds  # silent
    assert pair_kinds({"relations": None, "asked_pairs": None}) == {}


def test_kind_table_ap_within_each_kind():
    cells = [("asked", 3.0, True), ("asked", 1.0, False), ("asked", 2.0, True),
             ("silent", 0.5, True), ("silent", 2.5, False)]
    t = kind_table(cells)
    assert t["asked"]["ap"] == 1.0 and t["asked"]["cells"] == 3 and math.isclose(t["asked"]["share_true"], 2 / 3)
    assert t["silent"]["ap"] == 0.5  # the one truth ranked second of two
    assert t["silent"]["median_true"] == 0.5 and t["silent"]["median_false"] == 2.5
    # over all five: ranks 3.0 T, 2.5 F, 2.0 T, 1.0 F, 0.5 T -> AP = (1 + 2/3 + 3/5) / 3
    assert math.isclose(t["all"]["ap"], (1 + 2 / 3 + 3 / 5) / 3)
    assert "stated" not in t
