"""Audit report: Wilson intervals, majority labels, kappa, the corpus-weighted estimate, the CLI job."""

from __future__ import annotations

import json
import math

import pyarrow.parquet as pq
import pytest
from scipy.stats import binomtest, norm

from eval_jobs.audit_report import AuditReportConfig, main as report_main
from relate.audit.report import (agreement, build_audit_report, format_audit_report, item_labels,
                                 stratified_estimate, wilson_interval)
from relate.audit.sampler import AuditSampleConfig, sample_audit_batch
from relate.audit.store import open_verdict_store
from relate.schema import CORPUS_SCHEMA, to_table

Z = norm.ppf(0.975)


@pytest.mark.parametrize("k,n", [(0, 1), (1, 1), (3, 10), (7, 9), (0, 40), (40, 40), (123, 400)])
@pytest.mark.parametrize("conf", [0.9, 0.95])
def test_wilson_matches_scipy(k, n, conf):
    ref = binomtest(k, n).proportion_ci(confidence_level=conf, method="wilson")
    lo, hi = wilson_interval(k, n, conf)
    assert lo == pytest.approx(ref.low, abs=1e-9) and hi == pytest.approx(ref.high, abs=1e-9)


def test_wilson_edges():
    assert all(math.isnan(x) for x in wilson_interval(0, 0))
    with pytest.raises(ValueError, match="k <= n"):
        wilson_interval(3, 2)
    with pytest.raises(ValueError, match="confidence"):
        wilson_interval(1, 2, 1.0)


def _hand_kappa(a, b):
    n = len(a)
    po = sum(x == y for x, y in zip(a, b)) / n
    pe = sum((a.count(c) / n) * (b.count(c) / n) for c in ("true", "false", "unsure"))
    return (po - pe) / (1 - pe)


def test_labels_and_kappa():
    v = [("a", "i1", "true"), ("b", "i1", "true"), ("a", "i2", "true"), ("b", "i2", "false"),
         ("a", "i3", "unsure"), ("b", "i3", "false"), ("a", "i4", "unsure"), ("c", "i1", "true")]
    assert item_labels(v) == {"i1": "true", "i2": None, "i3": "false", "i4": None}
    pairs = {tuple(p["auditors"]): p for p in agreement(v)}
    assert set(pairs) == {("a", "b"), ("a", "c"), ("b", "c")}
    ab = pairs[("a", "b")]
    assert ab["items"] == 3 and ab["observed_agreement"] == pytest.approx(1 / 3)
    assert ab["kappa"] == pytest.approx(_hand_kappa(["true", "true", "unsure"], ["true", "false", "false"]))
    assert pairs[("a", "c")]["kappa"] is None  # one shared item, same label: kappa is 0/0
    assert agreement([("a", "i1", "true"), ("b", "i2", "true")]) == []


def _hand_stratified(cells, big):
    cov = {h: kn for h, kn in cells.items() if kn[1]}
    wsum = sum(big[h] for h in cov)
    est = sum(big[h] / wsum * k / n for h, (k, n) in cov.items())
    var = 0.0
    for h, (k, n) in cov.items():
        pt = (k + Z * Z / 2) / (n + Z * Z)
        var += (big[h] / wsum) ** 2 * pt * (1 - pt) / (n + Z * Z) * (big[h] - n) / (big[h] - 1)
    return est, max(0, est - Z * math.sqrt(var)), min(1, est + Z * math.sqrt(var))


def test_stratified_estimate_by_hand():
    big = {"s1": 100, "s2": 300, "s3": 50, "s4": 50}
    cells = {"s1": (1, 2), "s2": (1, 1), "s3": (0, 1), "s4": (0, 0)}
    out = stratified_estimate(cells, big)
    est, lo, hi = _hand_stratified(cells, big)
    assert out["precision"] == pytest.approx(350 / 450) == pytest.approx(est)
    assert out["ci"] == pytest.approx([lo, hi]) and out["covered_weight"] == pytest.approx(0.9)
    census = stratified_estimate({"s": (3, 4)}, {"s": 4})  # every relation judged: no sampling error
    assert census["ci"] == pytest.approx([0.75, 0.75])
    with pytest.raises(ValueError, match="not in the corpus"):
        stratified_estimate({"zz": (1, 1)}, big)


def test_build_report_by_hand():
    def it(i, s, fam):
        return {"item_id": i, "stratum": s, "pass": "semantic", "gate": "kept", "family": fam, "bucket": "rare"}
    items = [it("i1", "s1", "spatial"), it("i2", "s1", "spatial"), it("i3", "s1", "spatial"),
             it("i4", "s2", "action"), it("i5", "s2", "action"), it("i6", "s3", "depth")]
    big = {"s1": 100, "s2": 300, "s3": 50, "s4": 50}
    verdicts = [("alice", "i1", "true"), ("alice", "i2", "true"), ("alice", "i3", "false"), ("alice", "i4", "true"),
                ("alice", "i5", "unsure"), ("alice", "i6", "false"),
                ("bob", "i1", "true"), ("bob", "i2", "false"), ("bob", "i3", "false"), ("bob", "i4", "true")]
    r = build_audit_report(items, verdicts, big)
    rows = {x["stratum"]: x for x in r["strata"]}
    assert (rows["s1"]["true"], rows["s1"]["n"], rows["s1"]["unresolved"]) == (1, 2, 1)
    assert (rows["s2"]["true"], rows["s2"]["n"], rows["s2"]["unresolved"]) == (1, 1, 1)
    assert (rows["s3"]["true"], rows["s3"]["n"]) == (0, 1) and rows["s3"]["weight"] == pytest.approx(0.1)
    assert rows["s1"]["ci"] == pytest.approx(list(wilson_interval(1, 2)))
    assert (r["overall"]["true"], r["overall"]["n"]) == (2, 4)
    est, lo, hi = _hand_stratified({"s1": (1, 2), "s2": (1, 1), "s3": (0, 1)}, big)
    assert r["corpus_estimate"]["precision"] == pytest.approx(est)
    assert r["corpus_estimate"]["ci"] == pytest.approx([lo, hi])
    assert r["agreement"][0]["kappa"] == pytest.approx(0.5)  # po = 3/4, pe = 1/2
    assert r["auditors"]["alice"]["counts"] == {"true": 3, "false": 2, "unsure": 1}
    assert r["auditors"]["alice"]["precision"] == pytest.approx(3 / 5)
    fam = {x["family"]: x for x in r["by"]["family"]}
    assert (fam["spatial"]["true"], fam["spatial"]["n"]) == (1, 2) and fam["depth"]["weighted"] == 0.0
    assert (r["judged_items"], r["unresolved_items"]) == (6, 2)
    text = format_audit_report(r)
    assert "corpus-weighted" in text and "kappa 0.500" in text
    with pytest.raises(ValueError, match="not in the batch"):
        build_audit_report(items, verdicts + [("alice", "zz", "true")], big)


_BOX = dict(x1=1.0, y1=1.0, x2=5.0, y2=5.0, category="thing", is_person=False, is_body_part=False)


def _write_corpus(root, preds):
    rows = [dict(image_id=f"im{i}", uri=f"/x/{i}.png", width=9, height=9, source="t", split="train",
                 boxes=[_BOX, _BOX], relations=[{"subject": 0, "object": 1, "predicate": p, "pass": "semantic",
                                                 "gate": "kept", "score": None} for p in preds])
            for i in range(4)]
    (root / "corpus" / "train").mkdir(parents=True)
    pq.write_table(to_table(rows, CORPUS_SCHEMA), root / "corpus" / "train" / "part-0.parquet")
    return to_table(rows, CORPUS_SCHEMA)


def test_report_job_writes_json_and_checks_the_corpus(tmp_path, capsys):
    table = _write_corpus(tmp_path / "run", ["left of", "holding", "behind"])
    batch = sample_audit_batch(table, AuditSampleConfig(per_stratum=3))
    store = open_verdict_store(tmp_path / "v.db", batch)
    ids = [it["item_id"] for it in store.items()]
    for i, v in zip(ids, ["true", "false", "true", "true", "unsure", "false"]):
        store.record("ann", i, v)
    store.close()
    report = report_main(AuditReportConfig(db=str(tmp_path / "v.db"), corpus=str(tmp_path / "run")))
    written = json.loads((tmp_path / "v.db.report.json").read_text())
    assert written == json.loads(json.dumps(report))
    assert (report["overall"]["true"], report["overall"]["n"]) == (3, 5)
    assert sum(r["corpus_relations"] for r in report["strata"]) == 12
    assert "sample precision" in capsys.readouterr().out
    _write_corpus(tmp_path / "other", ["left of", "holding", "near"])
    with pytest.raises(ValueError, match="does not match the audit batch"):
        report_main(AuditReportConfig(db=str(tmp_path / "v.db"), corpus=str(tmp_path / "other")))
