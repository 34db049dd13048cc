"""The detector and judge actor classes (used by Serve deployments and Ray Data alike)."""

from __future__ import annotations

import numpy as np
import pytest

from actors.detector import DetectorActor, DetectorConfig
from actors.judge import JudgeActor, JudgeConfig, ScriptedJudge, corrupt, parse_verdict


@pytest.fixture(scope="module")
def owl_dir(tmp_path_factory):
    from serve_apps.tiny import save_tiny_owlv2

    return save_tiny_owlv2(tmp_path_factory.mktemp("owl"))


def test_detector_threshold_and_cap(owl_dir):
    det = DetectorActor(DetectorConfig(mode="transformers", model=str(owl_dir), threshold=0.0, max_boxes=7))
    img = np.random.default_rng(0).integers(0, 255, (50, 90, 3), dtype=np.uint8)
    boxes = det.detect(img, ["cup", "person"])
    assert 1 <= len(boxes) <= 7
    scores = [b["score"] for b in boxes]
    assert scores == sorted(scores, reverse=True)
    for b in boxes:
        assert 0 <= b["x1"] < b["x2"] <= 90 and 0 <= b["y1"] < b["y2"] <= 50
        assert b["label"] in ("cup", "person")
    cut = np.median(scores)
    assert all(b["score"] >= cut for b in det.detect(img, ["cup", "person"], threshold=cut))
    assert len(det.detect(img, ["cup"], max_boxes=2)) <= 2
    out = det({"image": [img, img]})  # Ray Data batch form
    assert len(out["detections"]) == 2 and out["detections"][0] == det.detect(img)
    frozen = img.copy()
    frozen.flags.writeable = False  # what np.frombuffer / Arrow-backed decodes hand over
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch warns on non-writable arrays
        assert det.detect(frozen, ["cup", "person"]) == det.detect(img, ["cup", "person"])


def test_detector_none_mode_refuses():
    det = DetectorActor({"mode": "none"})
    with pytest.raises(ValueError, match="no detector is configured"):
        det.detect(np.zeros((8, 8, 3), np.uint8))
    with pytest.raises(ValueError, match="needs 'model'"):
        DetectorConfig(mode="transformers")


def test_parse_verdict_reads_last_json_object():
    assert parse_verdict('I think {"answer": "no"} ... final: {"answer": "yes"}') is True
    assert parse_verdict('```json\n{"answer": "No"}\n```') is False
    assert parse_verdict('{"answer": true}') is True
    assert parse_verdict("yes, certainly") is None
    assert parse_verdict('{"answer": "maybe"}') is None
    assert parse_verdict(None) is None


def test_corrupt_swaps_to_other_predicates_of_the_image():
    rels = [{"subject": 0, "object": 1, "predicate": p} for p in ("on", "near", "holding", "on")]
    swaps = corrupt(rels, 0.5, seed=3)
    assert len(swaps) == 2
    for i, p in swaps:
        assert p != rels[i]["predicate"] and p in {"on", "near", "holding"}
    assert corrupt(rels, 0.5, seed=3) == swaps
    assert corrupt([{"subject": 0, "object": 1, "predicate": "on"}] * 3, 1.0, 0) == []


def test_scripted_judge_end_to_end():
    judge = JudgeActor(JudgeConfig(backend="scripted"))
    img = np.full((60, 100, 3), 200, np.uint8)
    boxes = [[5, 10, 30, 40], [60, 10, 95, 40]]
    rels = [{"subject": 0, "object": 1, "predicate": "left of"}, {"subject": 1, "object": 0, "predicate": "left of"},
            {"subject": 0, "object": 1, "predicate": "above"}]
    out = judge.judge(img, boxes, rels, corruption_share=1.0, seed=0)
    assert [v["verdict"] for v in out["verdicts"]] == [True, False, False]
    assert len(out["controls"]) == 3
    assert all(c["original_predicate"] != c["predicate"] for c in out["controls"])
    acc = np.mean([c["verdict"] for c in out["controls"]])
    assert out["control_acceptance"] == pytest.approx(acc)
    assert '"answer"' in out["verdicts"][0]["raw"]


def test_judge_config_needs_backend_section():
    with pytest.raises(ValueError, match="needs a 'openai' section"):
        JudgeConfig(backend="openai")
    assert isinstance(JudgeActor({"backend": "scripted"}).backend, ScriptedJudge)


def _images():
    rng = np.random.default_rng(1)
    return [rng.integers(0, 255, shape, dtype=np.uint8) for shape in [(50, 90, 3), (64, 64, 3), (80, 40, 3)]]


def _same_boxes(got: list[dict], want: list[dict]) -> None:
    assert len(got) == len(want) > 0
    for g, w in zip(got, want):
        assert g["label"] == w["label"]
        for k in ("x1", "y1", "x2", "y2", "score"):
            assert abs(g[k] - w[k]) <= 1e-5, (k, g, w)


def test_detect_batch_equals_one_call_per_image(owl_dir):
    """One forward for three differently sized images gives each image the boxes a lone call gives."""
    det = DetectorActor(DetectorConfig(mode="transformers", model=str(owl_dir), threshold=0.0, max_boxes=7))
    images = _images()
    batched = det.detect_batch(images, ["cup", "person"])
    assert len(batched) == 3
    for got, image in zip(batched, images):
        _same_boxes(got, det.detect(image, ["cup", "person"]))
    capped = det.detect_batch(images, ["cup"], threshold=0.3, max_boxes=2)
    for got, image in zip(capped, images):
        assert len(got) <= 2 and all(b["score"] >= 0.3 for b in got)
        assert got == det.detect(image, ["cup"], threshold=0.3, max_boxes=2)


def test_detector_deployment_groups_a_batch_by_queries(owl_dir):
    """The Serve deployment's batch body (run in process): requests with different queries and caps in
    one serve.batch each get exactly what a lone detect call returns."""
    from serve_apps.config import DetectorSettings
    from serve_apps.deployments.detector import DetectorDeployment

    settings = DetectorSettings(detector={"mode": "transformers", "model": str(owl_dir), "threshold": 0.0},
                                max_batch_size=8)
    dep = DetectorDeployment.func_or_class(settings)
    images = _images()
    reqs = [{"image": images[0], "queries": ("cup", "person"), "threshold": None, "max_boxes": None},
            {"image": images[1], "queries": None, "threshold": None, "max_boxes": 3},
            {"image": images[2], "queries": ("cup", "person"), "threshold": None, "max_boxes": None},
            {"image": images[1], "queries": ("person",), "threshold": 0.5, "max_boxes": None}]
    out = dep._detect_many(reqs)
    for got, r in zip(out, reqs):
        assert got == dep.actor.detect(r["image"], r["queries"], r["threshold"], r["max_boxes"])
