"""`relate export --format onnx | openvino`: the whole forward as ONNX (run by onnxruntime) or OpenVINO
IR (run by OpenVINO in fp32) with the vocabulary as an input, scores within 1e-4 of torch for any
vocabulary and box count, selectable as a runtime in relate.api, relate predict and the Serve
deployment, and refused when exported from other weights. Every test runs for both runtimes."""

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

# runtime -> (export format, file relate export writes, load_model's keyword for another path)
RUNTIMES = {"onnxruntime": ("onnx", "relation.onnx", "onnx_path"), "openvino": ("openvino", "relation.xml", "ir_path")}


def _export(ck: Path, fmt: str) -> str:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    res = subprocess.run([str(Path(sys.executable).parent / "relate"), "export", "--checkpoint", str(ck),
                          "--format", fmt, "--check"], capture_output=True, text=True, timeout=900, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stderr


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A tiny checkpoint with its ONNX graph (the OpenVINO IR is read from it)."""
    from serve_apps.tiny import save_tiny_checkpoint

    root = tmp_path_factory.mktemp("onnx")
    ck = save_tiny_checkpoint(root / "ck", ["on", "near", "holding", "under"])
    assert "max |score(onnxruntime) - score(torch)|" in _export(ck, "onnx")
    assert (ck / "relation.onnx").is_file()
    return root, ck


@pytest.fixture(scope="module", params=list(RUNTIMES))
def exported(request, checkpoint):
    """(root, checkpoint, runtime) with the runtime's file exported by the CLI and checked against torch."""
    root, ck = checkpoint
    rt = request.param
    fmt, name, _ = RUNTIMES[rt]
    if fmt != "onnx":
        assert f"max |score({rt}) - score(torch)|" in _export(ck, fmt)
        # fp32 weights: save_model's default would store them as f16 constants
        assert 'element_type="f32"' in (ck / "relation.xml").read_text()
        assert 'element_type="f16"' not in (ck / "relation.xml").read_text()
    assert (ck / name).is_file()
    return root, ck, rt


def _scene(rng, n, h=50, w=70):
    img = (rng.random((h, w, 3)) * 255).astype(np.uint8)
    xy = rng.random((n, 2)) * [w * 0.7, h * 0.7]
    return img, np.concatenate([xy, xy + 3 + rng.random((n, 2)) * [w * 0.3, h * 0.3]], 1)


def test_scores_match_torch_for_any_vocabulary_and_box_count(exported):
    from relate.api import load_model

    _, ck, rt = exported
    ref, ort = load_model(ck), load_model(ck, runtime=rt)
    assert ort.runtime == rt and ort._session is not None
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

    _, ck, rt = exported
    _, name, path_kw = RUNTIMES[rt]
    other = save_tiny_checkpoint(tmp_path / "other", ["on", "near", "holding", "under"], seed=1)
    for f in ck.glob(Path(name).stem + ".*"):  # relation.onnx, or relation.xml with its .bin
        shutil.copy(f, other / f.name)
    with pytest.raises(ExportError, match="re-run relate export"):
        load_model(other, runtime=rt)
    with pytest.raises(ExportError, match="no exported graph"):
        load_model(ck, runtime=rt, **{path_kw: tmp_path / ("missing" + Path(name).suffix)})
    with pytest.raises(ValueError, match="runtime must be one of"):
        load_model(ck, runtime="tensorrt")
    img, bx = _scene(np.random.default_rng(0), 3)
    masks = np.zeros((3, 50, 70), bool)
    masks[:, 5:20, 5:30] = True
    with pytest.raises(ValueError, match=f"the {rt} runtime scores boxes only"):
        load_model(ck, runtime=rt).score_images([img], [masks])


def test_openvino_missing_names_the_extra(checkpoint, monkeypatch):
    from relate.export import ExportError, export_openvino, openvino_session

    _, ck = checkpoint
    monkeypatch.setitem(sys.modules, "openvino", None)  # import openvino now raises ImportError
    for call in (lambda: export_openvino(ck), lambda: openvino_session(ck / "relation.onnx")):
        with pytest.raises(ExportError, match=r"'openvino' extra: pip install -e '\.\[openvino\]'"):
            call()


def test_relate_predict_with_an_exported_runtime(exported):
    from relate.api import load_model

    root, ck, rt = exported
    img, bx = _scene(np.random.default_rng(2), 4)
    Image.fromarray(img).save(root / "p.png")
    (root / "b.json").write_text(json.dumps({"p.png": bx.tolist()}))
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    res = subprocess.run([str(Path(sys.executable).parent / "relate"), "predict", str(root / "p.png"),
                          "--checkpoint", str(ck), "--boxes", str(root / "b.json"), "--runtime", rt,
                          "--out", str(root / f"out-{rt}"), "--no-png", "--topk", "12"],
                         capture_output=True, text=True, timeout=600, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads((root / f"out-{rt}" / "p.json").read_text())["triplets"]
    want = load_model(ck).predict(img, bx, topk=12)
    assert len(got) == len(want) == 12
    np.testing.assert_allclose([t["score"] for t in got], [t["score"] for t in want], atol=1e-4)
    assert {(t["subject"], t["object"], t["predicate"]) for t in got[:3]} == \
           {(t["subject"], t["object"], t["predicate"]) for t in want[:3]}


def test_serve_deployment_runtime_setting(exported):
    """runtime: onnxruntime | openvino in the relation deployment's settings answers as the torch replica does."""
    from serve_apps.config import RelationSettings
    from serve_apps.deployments.relation import RelationModelDeployment

    _, ck, rt = exported
    cls = RelationModelDeployment.func_or_class
    dep = {r: cls({"checkpoint": str(ck), "runtime": r}) for r in ("torch", rt)}
    assert dep[rt].predictor._session is not None and dep["torch"].predictor._session is None
    img, bx = _scene(np.random.default_rng(3), 4)
    req = {"image": img, "regions": bx, "vocabulary": ["on", "beside"], "bank": None, "topk": 10, "threshold": None}
    a, b = (dep[r]._score_many([dict(req)])[0] for r in ("torch", rt))
    assert a["bank"] == b["bank"] and len(a["triplets"]) == len(b["triplets"]) == 10
    np.testing.assert_allclose([t["score"] for t in a["triplets"]], [t["score"] for t in b["triplets"]], atol=1e-4)
    with pytest.raises(ValueError, match="needs a checkpoint"):
        RelationSettings.model_validate({"random": {}, "runtime": rt})


def test_openvino_session_divides_exactly(tmp_path):
    """OpenVINO rewrites x / c as x * (1/c), one ulp off for most x; the session keeps the division (the
    box encoder's top Fourier band turns that ulp into score differences above 1e-4)."""
    import openvino as ov
    import openvino.opset13 as ops

    from relate.export import openvino_session

    x = ops.parameter([4096], np.float32, name="x")
    y = ops.divide(x, ops.constant(np.float32(448.0)))
    y.output(0).set_names({"y"})
    ov.save_model(ov.Model([y], [x]), str(tmp_path / "div.xml"), compress_to_fp16=False)
    xs = (np.random.default_rng(0).random(4096) * 448).astype(np.float32)
    got = openvino_session(tmp_path / "div.xml", threads=1).run(["y"], {"x": xs})[0]
    np.testing.assert_array_equal(got, xs / np.float32(448.0))
