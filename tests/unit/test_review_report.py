"""PoporoIN pair review: proposals table, durable answers, kappa against scikit-learn, the
disagreement list and resolution, and accepted pairs that pipelines.poporo_in reads unchanged."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sklearn.metrics import cohen_kappa_score

from pipelines.poporo_in import PairListsConfig
from relate.audit.review_report import (build_review_report, review_report_from_store, write_accepted_pairs)
from relate.audit.review_store import REJECT_REASONS, load_proposals, open_review_store
from relate.audit.store import AuditStoreError
from relate.data.poporo import plan_class_triplets, read_pair_list

CONV, BROAD, RELATED = REJECT_REASONS  # the three reasons, in the paper's order


def _proposals(tmp_path, rows=None):
    rows = rows or [
        ("p0", "CR", "microphone", "loudspeaker", ["gpt", "gemini"]), ("p1", "CR", "rifle", "revolver", ["gpt"]),
        ("p2", "TR", "microphone", "stage", ["gemini"]), ("p3", "TR", "rifle", "holster", ["gpt"]),
        ("p4", "CD", "microphone", "strawberry", ["gpt"]), ("p5", "CD", "rifle", "tomato", ["gemini"]),
        ("p6", "SD", "microphone", "ice_lolly", ["gpt"]), ("p7", "SD", "rifle", "walking_stick", ["gpt"]),
    ]
    path = tmp_path / "proposals.parquet"
    pq.write_table(pa.table({k: [r[i] for r in rows] for i, k in
                             enumerate(("pair_id", "cell", "class_a", "class_b", "models"))}), path)
    return path


def _answer(reviewer, pair_id, decision, reason=None):
    return {"reviewer": reviewer, "pair_id": pair_id, "decision": decision, "reason": reason}


def test_kappa_known_value_and_equals_sklearn():
    pairs = [{"pair_id": f"p{i}", "cell": "CR", "class_a": f"a{i}", "class_b": f"b{i}"} for i in range(8)]
    # ann: A A A A R R A R ; bob: A A A R R R R A -> po = 5/8, pe = (5*4 + 3*4)/64 = 1/2, kappa = 1/4
    ann = ["accept"] * 4 + ["reject"] * 2 + ["accept", "reject"]
    bob = ["accept"] * 3 + ["reject"] * 3 + ["reject", "accept"]
    ann_r = [None] * 4 + [CONV, BROAD, None, RELATED]
    bob_r = [None] * 3 + [CONV, CONV, BROAD, RELATED, None]
    answers = [_answer("ann", f"p{i}", d, r) for i, (d, r) in enumerate(zip(ann, ann_r))] + \
              [_answer("bob", f"p{i}", d, r) for i, (d, r) in enumerate(zip(bob, bob_r))]
    rep = build_review_report(pairs, answers, {})
    g = rep["agreement"][0]
    assert g["reviewers"] == ["ann", "bob"] and g["pairs"] == 8
    assert g["decision"]["kappa"] == pytest.approx(0.25)
    assert g["decision"]["kappa"] == pytest.approx(cohen_kappa_score(ann, bob))
    cat_a = [r or "accept" for r in ann_r]
    cat_b = [r or "accept" for r in bob_r]
    assert g["category"]["kappa"] == pytest.approx(cohen_kappa_score(cat_a, cat_b))
    assert g["category"]["observed"] == pytest.approx(5 / 8)   # p0-p2 accept, p4 and p5 same reason
    both = [i for i in range(8) if ann[i] == bob[i] == "reject"]
    assert both == [4, 5]
    assert g["reason_when_both_reject"]["pairs"] == 2
    assert g["reason_when_both_reject"]["kappa"] == pytest.approx(
        cohen_kappa_score([ann_r[i] for i in both], [bob_r[i] for i in both], labels=list(REJECT_REASONS)))
    # Disagreements on accept/reject: p3, p6, p7; both reject, for the same reasons, on p4 and p5.
    assert [d["pair_id"] for d in rep["disagreements"]] == ["p3", "p6", "p7"]
    assert rep["disagreements"][0]["answers"] == {"ann": {"decision": "accept", "reason": None},
                                                  "bob": {"decision": "reject", "reason": CONV}}
    assert rep["reason_differences"] == []
    assert rep["status"] == {"agreed": 5, "resolved": 0, "disagreement": 3, "pending": 0}


def test_perfect_and_constant_raters():
    pairs = [{"pair_id": f"p{i}", "cell": "CR", "class_a": f"a{i}", "class_b": f"b{i}"} for i in range(3)]
    same = [_answer(r, f"p{i}", "accept") for r in ("ann", "bob") for i in range(3)]
    g = build_review_report(pairs, same, {})["agreement"][0]
    assert g["decision"]["kappa"] is None and g["decision"]["observed"] == 1.0   # 0/0: sklearn gives nan


def test_store_answers_undo_resolve_and_pair_lists(tmp_path):
    props = load_proposals(_proposals(tmp_path))
    db = tmp_path / "review.sqlite"
    store = open_review_store(db, props)
    plan = {"ann": ["accept", "accept", "accept", "accept", "accept", ("reject", RELATED), "accept", "accept"],
            "bob": ["accept", ("reject", CONV), "accept", "accept", "accept", ("reject", RELATED), "accept",
                    ("reject", BROAD)]}
    for who, ans in plan.items():
        for p, a in zip(props, ans):
            d, r = (a, None) if isinstance(a, str) else a
            store.record(who, p["pair_id"], d, r)
    store.record("ann", "p7", "reject", CONV)                # a change of mind, then undone
    assert store.undo("ann") == "p7"
    with pytest.raises(AuditStoreError, match="reject reason"):
        store.record("ann", "p0", "reject", None)
    with pytest.raises(AuditStoreError, match="takes no reason"):
        store.record("ann", "p0", "accept", CONV)
    store.close()

    store = open_review_store(db, load_proposals(_proposals(tmp_path)))   # reopen: nothing lost
    live = store.live_answers()
    assert len(live) == 16
    rep = review_report_from_store(store)
    ya = [a["decision"] for a in live if a["reviewer"] == "ann"]
    yb = [a["decision"] for a in live if a["reviewer"] == "bob"]
    assert rep["agreement"][0]["decision"]["kappa"] == pytest.approx(cohen_kappa_score(ya, yb))
    assert [d["pair_id"] for d in rep["disagreements"]] == ["p1", "p7"]
    with pytest.raises(ValueError, match="2 disagreement"):
        write_accepted_pairs(rep, tmp_path / "pairs")
    store.resolve("carol", "p1", "accept")
    store.resolve("carol", "p7", "reject", BROAD)
    rep = review_report_from_store(store)
    assert rep["open"] == 0 and rep["status"]["resolved"] == 2
    assert rep["disagreements"][0]["resolution"] == {"resolver": "carol", "decision": "accept", "reason": None}
    assert rep["rejected_by_reason"] == {CONV: 0, BROAD: 1, RELATED: 1}
    assert rep["decisions"][0]["models"] == ["gemini", "gpt"]
    store.close()

    written = write_accepted_pairs(rep, tmp_path / "pairs")
    cfg = PairListsConfig.model_validate(json.loads((tmp_path / "pairs" / "pairs.json").read_text()))
    lists = {c: read_pair_list(getattr(cfg, c)) for c in ("CR", "TR", "CD", "SD")}
    assert written == {c: getattr(cfg, c) for c in ("CR", "TR", "CD", "SD")}
    assert lists == {"CR": [("microphone", "loudspeaker"), ("rifle", "revolver")],
                     "TR": [("microphone", "stage"), ("rifle", "holster")],
                     "CD": [("microphone", "strawberry")], "SD": [("microphone", "ice_lolly")]}
    assert plan_class_triplets(lists, 8, seed=0)          # the pipeline's planner takes them as they are


def test_proposals_are_checked(tmp_path):
    with pytest.raises(ValueError, match="cell 'XX'"):
        load_proposals(_proposals(tmp_path, [("p0", "XX", "a", "b", [])]))
    with pytest.raises(ValueError, match="without , #"):
        load_proposals(_proposals(tmp_path, [("p0", "CR", "a,b", "c", [])]))
    with pytest.raises(ValueError, match="already 'p0'"):
        load_proposals(_proposals(tmp_path, [("p0", "CR", "a", "b", []), ("p1", "CR", "a", "b", [])]))
    csv = tmp_path / "p.csv"
    csv.write_text("cell,class_a,class_b,models\nTR,drum,drumstick,gpt;gemini\n")
    assert load_proposals(csv) == [{"pair_id": "TR:drum,drumstick", "position": 0, "cell": "TR", "class_a": "drum",
                                    "class_b": "drumstick", "models": ["gemini", "gpt"]}]
    store = open_review_store(tmp_path / "r.sqlite", load_proposals(csv))
    with pytest.raises(AuditStoreError, match="another proposals table"):
        store.register_pairs(load_proposals(_proposals(tmp_path)))
