"""The relation deployment's bank cache and batch scoring, called directly (no Ray instance)."""

from __future__ import annotations

import numpy as np
import pytest

VOCAB = ["left of", "holding", "near"]


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    from serve_apps.deployments.relation import RelationModelDeployment
    from serve_apps.tiny import save_tiny_checkpoint

    ckpt = save_tiny_checkpoint(tmp_path_factory.mktemp("ck"), VOCAB)
    cls = RelationModelDeployment.func_or_class  # the plain class behind the Serve decorator
    return cls({"checkpoint": str(ckpt), "bank_cache_size": 2, "banks": {"few": ["on", "under"]}})


def _req(**kw):
    img = np.random.default_rng(0).integers(0, 255, (40, 60, 3), dtype=np.uint8)
    return {"image": img, "regions": np.array([[0, 0, 20, 20], [30, 5, 59, 39], [5, 20, 40, 39]], float),
            "vocabulary": None, "bank": None, "topk": 100, "threshold": None, **kw}


def test_batch_matches_predict_and_isolates_bad_requests(deployment):
    pred = deployment.predictor
    good = _req()
    bad = _req(regions=np.array([[10, 10, 5, 5], [0, 0, 3, 3]], float))  # inverted box
    out = deployment._score_many([good, bad, _req(bank="nope"), _req(threshold=0.5)])
    assert "error" in out[1] and "inverted" in out[1]["error"]
    assert "unknown bank" in out[2]["error"] and "calibrated" in out[3]["error"]
    direct = pred.predict(good["image"], good["regions"], topk=100)
    got = {(t["subject"], t["object"], t["predicate"]): t["score"] for t in out[0]["triplets"]}
    assert len(got) == len(direct) == 6 * len(VOCAB)
    for t in direct:
        assert got[(t["subject"], t["object"], t["predicate"])] == pytest.approx(t["score"], abs=1e-6)


def test_request_vocabularies_are_cached_by_hash_and_evicted(deployment):
    pred = deployment.predictor
    vocabs = [["riding", "behind"], ["on", "under"], ["near", "far from"], ["riding", "behind"]]
    labels = []
    for v in vocabs:
        labels.append(deployment._score_many([_req(vocabulary=v)])[0]["bank"])
    assert labels[0] == labels[3] and labels[0].startswith("request:") and len(set(labels)) == 3
    # LRU of 2 request vocabularies; the default and the named bank stay pinned
    assert pred.has_vocabulary(VOCAB)
    assert pred.has_vocabulary(("near", "far from")) and pred.has_vocabulary(("riding", "behind"))
    out = deployment._score_many([_req(bank="few")])[0]
    assert out["bank"] == "few" and out["vocabulary_size"] == 2
    deployment._score_many([_req(vocabulary=["x1", "x2"])])
    deployment._score_many([_req(vocabulary=["x3", "x4"])])
    assert pred.has_vocabulary(("on", "under"))  # named bank pinned although used as a request vocabulary too
    assert not pred.has_vocabulary(("riding", "behind")) and len(deployment.cache._lru) == 2
