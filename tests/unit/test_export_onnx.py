"""`relate export --format onnx`: the whole forward as ONNX with the vocabulary as an input, scores
within 1e-4 of torch for any vocabulary and box count, selectable as a runtime in relate.api and
relate predict, and refused when exported from other weights."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from relate.model.score import relation_score

pytestmark = pytest.mark.slow  # one export takes about 1.5 min on 2 busy cores


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from serve_apps.tiny import save_tiny_checkpoint

    root = tmp_path_factory.mktemp("onnx")
    ck = save_tiny_checkpoint(root / "ck", ["on", "near", "holding", "under"])
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    res = subprocess.run([str(Path(sys.executable).parent / "relate"), "export", "--checkpoint", str(ck),
                          "--format", "onnx", "--check"], capture_output=True, text=True, timeout=900, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "max |score(onnxruntime) - score(torch)|" in res.stderr
    assert (ck / "relation.onnx").is_file()
    return root, ck


def _scene(rng, n, h=50, w=70):
    img = (rng.random((h, w, 3)) * 255).astype(np.uint8)
    xy = rng.random((n, 2)) * [w * 0.7, h * 0.7]
    return img, np.concatenate([xy, xy + 3 + rng.random((n, 2)) * [w * 0.3, h * 0.3]], 1)


def test_scores_match_torch_for_any_vocabulary_and_box_count(exported):
    from relate.api import load_model

    _, ck = exported
    ref, ort = load_model(ck), load_model(ck, runtime="onnxruntime")
    assert ort.runtime == "onnxruntime" and ort._session is not None
    rng = np.random.default_rng(1)
    scenes = [_scene(rng, n) for n in (2, 5, 9)]
    images, boxes = [s[0] for s in scenes], [s[1] for s in scenes]
    w = ref.model.cfg.pair_weight
    # the checkpoint's bank, then a swapped vocabulary of another size: no re-export
    for vocab in (None, ["riding", "sitting on", "next to", "in front of", "wearing", "behind", "eating"]):
        a, b = ref.score_images(images, boxes, vocab), ort.score_images(images, boxes, vocab)  # one padded batch
        for sa, sb, n in zip(a, b, (2, 5, 9)):
            assert sa.pairs.shape[0] == n * (n - 1) or sa.pairs.shape[0] > 0
            np.testing.assert_array_equal(sa.pairs, sb.pairs)
            assert sb.l_pred.shape[1] == (4 if vocab is None else 7)
            diff = np.abs(relation_score(sa.l_pred, sa.l_pair, w) - relation_score(sb.l_pred, sb.l_pair, w)).max()
            assert diff <= 1e-4
            np.testing.assert_allclose(sa.z_sem, sb.z_sem, atol=1e-5)
    t_ref = ref.predict(images[2], boxes[2], decompose=True)
    t_ort = ort.predict(images[2], boxes[2], decompose=True)
    for key in ("layout", "content"):
        assert [(t["subject"], t["object"], t["predicate"]) for t in t_ref[key]] == \
               [(t["subject"], t["object"], t["predicate"]) for t in t_ort[key]]


def test_a_graph_from_other_weights_is_refused(exported, tmp_path):
    from relate.api import load_model
    from relate.export import ExportError
    from serve_apps.tiny import save_tiny_checkpoint

    _, ck = exported
    other = save_tiny_checkpoint(tmp_path / "other", ["on", "near", "holding", "under"], seed=1)
    shutil.copy(ck / "relation.onnx", other / "relation.onnx")
    with pytest.raises(ExportError, match="re-run relate export"):
        load_model(other, runtime="onnxruntime")
    with pytest.raises(ExportError, match="no exported graph"):
        load_model(ck, runtime="onnxruntime", onnx_path=tmp_path / "missing.onnx")
    with pytest.raises(ValueError, match="runtime must be one of"):
        load_model(ck, runtime="tensorrt")
    img, bx = _scene(np.random.default_rng(0), 3)
    masks = np.zeros((3, 50, 70), bool)
    masks[:, 5:20, 5:30] = True
    with pytest.raises(ValueError, match="boxes only"):
        load_model(ck, runtime="onnxruntime").score_images([img], [masks])


def test_relate_predict_with_the_onnxruntime_runtime(exported):
    from relate.api import load_model

    root, ck = exported
    img, bx = _scene(np.random.default_rng(2), 4)
    Image.fromarray(img).save(root / "p.png")
    (root / "b.json").write_text(json.dumps({"p.png": bx.tolist()}))
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    res = subprocess.run([str(Path(sys.executable).parent / "relate"), "predict", str(root / "p.png"),
                          "--checkpoint", str(ck), "--boxes", str(root / "b.json"), "--runtime", "onnxruntime",
                          "--out", str(root / "out"), "--no-png", "--topk", "12"],
                         capture_output=True, text=True, timeout=600, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads((root / "out" / "p.json").read_text())["triplets"]
    want = load_model(ck).predict(img, bx, topk=12)
    assert len(got) == len(want) == 12
    np.testing.assert_allclose([t["score"] for t in got], [t["score"] for t in want], atol=1e-4)
    assert {(t["subject"], t["object"], t["predicate"]) for t in got[:3]} == \
           {(t["subject"], t["object"], t["predicate"]) for t in want[:3]}


def test_serve_deployment_runtime_setting(exported):
    """runtime: onnxruntime in the relation deployment's settings answers as the torch replica does."""
    from serve_apps.config import RelationSettings
    from serve_apps.deployments.relation import RelationModelDeployment

    _, ck = exported
    cls = RelationModelDeployment.func_or_class
    dep = {rt: cls({"checkpoint": str(ck), "runtime": rt}) for rt in ("torch", "onnxruntime")}
    assert dep["onnxruntime"].predictor._session is not None and dep["torch"].predictor._session is None
    img, bx = _scene(np.random.default_rng(3), 4)
    req = {"image": img, "regions": bx, "vocabulary": ["on", "beside"], "bank": None, "topk": 10, "threshold": None}
    a, b = (dep[rt]._score_many([dict(req)])[0] for rt in ("torch", "onnxruntime"))
    assert a["bank"] == b["bank"] and len(a["triplets"]) == len(b["triplets"]) == 10
    np.testing.assert_allclose([t["score"] for t in a["triplets"]], [t["score"] for t in b["triplets"]], atol=1e-4)
    with pytest.raises(ValueError, match="needs a checkpoint"):
        RelationSettings.model_validate({"random": {}, "runtime": "onnxruntime"})
