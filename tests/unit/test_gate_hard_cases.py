"""The gate at and just past every threshold of Algorithm 1, against an exact reading of the paper.

Expected verdicts come from relate.data.gate_hard_cases (exact rational arithmetic on the boxes,
written from Algorithm 1's inequalities) and, for the boxes built here, from the inequality
itself: ">=" fires at the threshold, "<" and ">" do not.
"""

from __future__ import annotations

import numpy as np
import pytest

from relate.data.gate_hard_cases import (HARD_RULES, HardCaseConfig, expected_verdict, format_hard_case_table,
                                         hard_case_items, margin_bin, score_hard_cases)
from relate.gate import BoxTable, Candidates, gate_relations

EPS = 1e-3


def _b(x1, y1, x2, y2, person=False, part=False):
    return {"x1": x1, "y1": y1, "x2": x2, "y2": y2, "is_person": person, "is_body_part": part, "category": None}


def _gate(s: dict, o: dict, predicate: str, pass_name: str) -> str:
    res = gate_relations(BoxTable.from_images(["img"], [[s, o]]),
                         Candidates.from_lists([0], [0], [1], [predicate], [pass_name]))
    rule = res.rule_names()[0]
    return f"rejected:{rule}" if rule is not None else ("swapped" if res.repaired[0] else "kept")


def _rule(name: str, predicate: str | None = None):
    return next(r for r in HARD_RULES if r.name == name and (predicate is None or r.predicate == predicate))


# (rule, predicate, subject, object at offset t, offset where the threshold is met exactly, fires there?)
def _cases():
    sq = _b(0, 0, 10, 10)
    yield "person_duplicate", None, lambda t: (_b(0, 0, 10, 10, person=True), _b(0, 0, 10, 7 + t, person=True)), 0.0, True
    yield "containment_no_overlap", None, lambda t: (sq, _b(5 + t, 0, 20, 10)), 0.0, False
    yield "body_part_object", None, lambda t: (sq, _b(4 + t, 0, 14 + t, 10, part=True)), 0.0, True
    # boxes of diagonal 50 (30 x 40); an object 25 px away is exactly half a diagonal off
    yield "proximity_far", None, lambda t: (_b(0, 0, 30, 40), _b(55 + t, 0, 85 + t, 40)), 0.0, False
    yield "contact_disjoint", None, lambda t: (sq, _b(10 + t, 0, 20 + t, 10)), 0.0, False
    yield "semantic_disjoint", None, lambda t: (sq, _b(10 + t, 2, 20 + t, 8)), 0.0, False
    yield "direction_repair", "at the left of", lambda t: (_b(0 + t, 0, 10 + t, 10), _b(-2, 20, 12, 30)), 0.0, False
    yield "direction_repair", "located above", lambda t: (_b(20, 0 + t, 30, 10 + t), _b(0, -4, 10, 14)), 0.0, False


@pytest.mark.parametrize("name,predicate,make,at,fires_at", list(_cases()), ids=lambda x: x if isinstance(x, str) else "")
def test_verdict_at_and_just_past_each_threshold(name, predicate, make, at, fires_at):
    rule = _rule(name, predicate)
    # offsets: at the threshold, then one step to each side; which side fires follows from geometry
    for t in (at, at - EPS, at + EPS):
        s, o = make(t)
        fires, margin = expected_verdict(name, s, o, predicate=rule.predicate)
        if t == at:
            assert fires is fires_at and margin == 0.0, (name, margin)
        else:
            assert abs(margin) < 1e-3 and margin != 0.0, (name, t, margin)
        got = _gate(s, o, rule.predicate, rule.pass_name)
        assert (got == rule.expect) is fires, (name, t, margin, got)
        if not fires:
            assert got in ("kept", "swapped") if name != "direction_repair" else got == "kept", (name, t, got)
    # both sides are really reached: one offset fires and one does not
    verdicts = {expected_verdict(name, *make(t), predicate=rule.predicate)[0] for t in (at - EPS, at + EPS)}
    assert verdicts == {True, False}, name


def test_every_threshold_rule_of_algorithm1_is_covered():
    assert {r.name for r in HARD_RULES} == {"person_duplicate", "contact_disjoint", "containment_no_overlap",
                                            "proximity_far", "direction_repair", "body_part_object",
                                            "semantic_disjoint"}


def test_items_are_nearest_the_threshold_on_both_sides_and_off_by_default():
    boxes = [_b(0, 0, 10, 10), _b(5, 0, 20, 10), _b(4, 0, 20, 10), _b(30, 0, 40, 10), _b(100, 100, 110, 110)]
    assert hard_case_items(boxes, "spatial", HardCaseConfig()) == []
    items = hard_case_items(boxes, "spatial", HardCaseConfig(enabled=True))
    cont = {i["injected"]: (i["subject"], i["object"]) for i in items if i["predicate"] == "contained in"}
    # 0 in 1 is exactly 0.5 (kept at the threshold); 0 in 2 is 0.6; 1 in 0 is 1/3 (just below -> fires)
    assert cont["hard/containment_no_overlap/pass/=0"] == (0, 1)
    assert any(k.startswith("hard/containment_no_overlap/fire/") for k in cont)
    assert {i["injected"].split("/")[2] for i in items} == {"fire", "pass"}


def test_scoring_counts_hits_misses_and_false_firings_per_margin():
    tags = {"hard/containment_no_overlap/fire/<0.01": {"rejected:containment_no_overlap": 3, "passed": 1},
            "hard/containment_no_overlap/pass/=0": {"rejected:containment_no_overlap": 1, "passed": 4},
            "hard/direction_repair/fire/<0.1": {"swapped": 2},
            "hard/direction_repair/pass/<0.1": {"passed": 2, "rejected:duplicate": 1},
            "contact_disjoint": {"rejected:contact_disjoint": 5}}
    sc = score_hard_cases(tags)
    c = sc["containment_no_overlap"]
    assert (c["fire"], c["hit"], c["pass"], c["false_fire"]) == (4, 3, 5, 1)
    assert c["recall"] == 0.75 and c["precision"] == 0.75
    assert c["by_margin"]["pass =0"] == {"n": 5, "fired": 1}
    d = sc["direction_repair"]
    assert d["recall"] == 1.0 and d["precision"] == 1.0 and d["other_rule"] == 1
    assert "contact_disjoint" not in sc
    assert "containment_no_overlap" in format_hard_case_table(sc)
    assert [margin_bin(x) for x in (0.0, -0.005, 0.02, 0.05, -0.2, 0.9)] == ["=0", "<0.01", "<0.03", "<0.1", "<0.3", ">=0.3"]


def test_verdicts_do_not_use_the_gate_geometry():
    import relate.data.gate_hard_cases as hc

    src = open(hc.__file__).read()
    assert "relate.geometry" not in src.split('"""', 2)[2] and "relate.gate" not in src.split('"""', 2)[2]
    assert np.isfinite(expected_verdict("proximity_far", _b(0, 0, 1, 1), _b(3, 3, 4, 4))[1])


@pytest.fixture(scope="module")
def hard_run(tmp_path_factory):
    """The annotation stages without Ray on synthetic scenes, hard cases on (as the pipeline runs)."""
    from pipelines.annotate import AnnotateConfig
    from relate.annotation_stats import format_annotation_table
    from tests.unit.test_gate_scoring import annotate_with_statistics, synthetic_records

    records = synthetic_records(tmp_path_factory.mktemp("hard"), 60)
    cfg = AnnotateConfig(duplicate_person_rate=0.5, cpu_batch_size=30,
                         vlm={"scripted": {"hard_cases": {"enabled": True}}})
    _, _, stats = annotate_with_statistics(records, cfg)
    return stats, format_annotation_table(stats)


def test_pipeline_reports_recall_and_precision_per_rule_with_margins(hard_run):
    stats, table = hard_run
    hc = stats["gate_hard_cases"]
    assert set(hc) == {r.name for r in HARD_RULES}
    for rule, d in hc.items():
        assert d["fire"] > 0 and d["pass"] > 0, (rule, d)           # both sides of the threshold
        assert d["recall"] == 1.0 and d["precision"] == 1.0 and d["other_rule"] == 0, (rule, d)
    near = {rule for rule, d in hc.items() for k in d["by_margin"] if k.split()[1] in ("=0", "<0.01", "<0.03")}
    assert {"contact_disjoint", "semantic_disjoint", "proximity_far", "direction_repair", "containment_no_overlap"} <= near
    assert "gate hard cases" in table and "fired/n by side and |margin|" in table
    # the ordinary injected errors are still scored on their own, unmixed with the hard cases
    assert not any(k.startswith("hard/") for k in stats["gate_scoring"]["per_error_kind"])
