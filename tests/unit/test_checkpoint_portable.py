"""Checkpoints that load anywhere: no hub, from a folder or a URI, with verified file digests.

The checkpoint's config says ``backbone.pretrained: true`` (what a run of
train_jobs/configs/released.yaml writes); loading must still need nothing but its own files.
The no-network proof runs in a fresh process with the hub offline, an unreachable hub endpoint and
proxies, and empty caches. ``s3://`` is exercised against a real S3 endpoint (moto's server on
127.0.0.1, tests/_s3_endpoint.py) over HTTP; ``file://`` goes through the same pyarrow.fs path.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from _s3_endpoint import SECRET, s3_endpoint
from relate.api import RelationPredictor, load_model
from relate.checkpoint import CheckpointError, load_checkpoint, save_checkpoint, write_calibration
from relate.model.score import Calibration
from relate.model import RelationModelConfig, create_relation_model
from relate.text.bank import TextBank
from serve_apps.tiny import TINY_RELATION_MODEL

REPO = Path(__file__).resolve().parents[2]
TEXT_DIM = 16
VOCAB = ["on", "under", "near", "holding", "riding"]
DEAD = "http://127.0.0.1:9"  # the discard port: nothing answers

_CHILD = """
import json, sys
import numpy as np, torch
torch.set_num_threads(int(sys.argv[3]))
from relate.api import load_model
image, boxes = np.load(sys.argv[2] + "/image.npy"), np.load(sys.argv[2] + "/boxes.npy")
print("RESULT " + json.dumps(load_model(sys.argv[1]).predict(image, boxes, topk=20)))
"""


def _save(folder: Path, **backbone) -> tuple[RelationPredictor, Path]:
    """A seeded tiny checkpoint whose saved config carries ``backbone`` overrides the weights were
    not built with (as a run that started from pretrained weights records them)."""
    cfg = RelationModelConfig.model_validate({**TINY_RELATION_MODEL, "text_dim": TEXT_DIM})
    torch.manual_seed(0)
    net = create_relation_model(cfg)
    net.cfg = cfg.model_copy(update={"backbone": cfg.backbone.model_copy(update=backbone)})
    m = np.random.default_rng(0).standard_normal((len(VOCAB), TEXT_DIM)).astype(np.float32)
    bank = TextBank(tuple(VOCAB), m / np.linalg.norm(m, axis=1, keepdims=True), "minilm")
    save_checkpoint(folder, net, bank)
    return RelationPredictor(net, bank), folder


def _inputs() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    image = rng.integers(0, 255, size=(40, 56, 3), dtype=np.uint8)
    boxes = np.array([[2, 2, 30, 30], [20, 10, 54, 38], [36, 2, 55, 20], [4, 20, 24, 39]], np.float32)
    return image, boxes


@pytest.fixture(scope="module")
def pretrained_ckpt(tmp_path_factory) -> tuple[list[dict], Path]:
    """(in-process reference triplets, folder) for a checkpoint saved with backbone.pretrained: true."""
    folder = tmp_path_factory.mktemp("portable") / "ck"
    reference, folder = _save(folder, pretrained=True)
    return reference.predict(*_inputs(), topk=20), folder


def _offline_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_ENDPOINT=DEAD, HF_HOME=str(tmp / "hf"),
               TORCH_HOME=str(tmp / "torch"), PYTHONPATH=str(REPO), NO_PROXY="", no_proxy="")
    for key in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        env[key] = env[key.lower()] = DEAD
    return env


@pytest.mark.parametrize("as_uri", [False, True], ids=["folder", "file-uri"])
def test_loads_in_a_fresh_offline_process_with_identical_scores(pretrained_ckpt, tmp_path, as_uri):
    reference, folder = pretrained_ckpt
    assert yaml.safe_load((folder / "config.yaml").read_text())["backbone"]["pretrained"] is True
    image, boxes = _inputs()
    np.save(tmp_path / "image.npy", image)
    np.save(tmp_path / "boxes.npy", boxes)
    source = f"file://{folder}" if as_uri else str(folder)
    proc = subprocess.run([sys.executable, "-c", _CHILD, source, str(tmp_path), str(torch.get_num_threads())],
                          cwd=REPO, env=_offline_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    got = json.loads(line[len("RESULT "):])
    assert got and got == reference  # exact: the same weights, not a re-download or a fresh init


def test_loaded_config_is_the_saved_one(pretrained_ckpt):
    _, folder = pretrained_ckpt
    ck = load_checkpoint(folder)
    saved = RelationModelConfig.model_validate(yaml.safe_load((folder / "config.yaml").read_text()))
    assert ck.config == saved and ck.model.cfg == saved and ck.config.backbone.pretrained


def test_a_backbone_file_of_the_training_machine_is_not_needed(tmp_path):
    reference, folder = _save(tmp_path / "ck", pretrained=True, checkpoint_path=str(tmp_path / "absent.safetensors"))
    image, boxes = _inputs()
    assert load_model(str(folder)).predict(image, boxes, topk=20) == reference.predict(image, boxes, topk=20)


@pytest.fixture
def empty_tempdir(tmp_path, monkeypatch) -> Path:
    """tempfile's default folder, to check that a URI load leaves nothing behind."""
    d = tmp_path / "tmp"
    d.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    return d


def test_tampered_weights_are_refused_naming_the_file_and_both_digests(pretrained_ckpt, tmp_path, empty_tempdir):
    folder = Path(shutil.copytree(pretrained_ckpt[1], tmp_path / "ck"))
    recorded = json.loads((folder / "meta.json").read_text())["sha256"]["model.safetensors"]
    data = bytearray((folder / "model.safetensors").read_bytes())
    data[-1] ^= 0x01  # a tensor byte: the file still parses, only the digest tells
    (folder / "model.safetensors").write_bytes(bytes(data))
    actual = hashlib.sha256(data).hexdigest()
    for source in (folder, f"file://{folder}"):
        with pytest.raises(CheckpointError, match="model.safetensors") as exc:
            load_checkpoint(source)
        assert str(folder) in str(exc.value) and recorded in str(exc.value) and actual in str(exc.value)
    assert not any(empty_tempdir.iterdir())


def test_a_checkpoint_without_digests_still_loads_unverified(pretrained_ckpt, tmp_path):
    reference, src = pretrained_ckpt
    folder = Path(shutil.copytree(src, tmp_path / "ck"))
    meta = json.loads((folder / "meta.json").read_text())
    del meta["sha256"]
    (folder / "meta.json").write_text(json.dumps(meta))
    assert load_model(str(folder)).predict(*_inputs(), topk=20) == reference


def test_a_uri_load_leaves_no_temporary_files(pretrained_ckpt, empty_tempdir):
    reference, folder = pretrained_ckpt
    assert load_model(f"file://{folder}").predict(*_inputs(), topk=20) == reference
    assert not any(empty_tempdir.iterdir())


def test_a_uri_missing_a_file_or_unreadable_is_a_clear_error(pretrained_ckpt, tmp_path, empty_tempdir):
    folder = Path(shutil.copytree(pretrained_ckpt[1], tmp_path / "ck"))
    (folder / "text_bank.npz").unlink()
    uri = f"file://{folder}"
    with pytest.raises(CheckpointError, match=r"file://.*/ck: not a relation checkpoint, missing \['text_bank.npz'\]"):
        load_checkpoint(uri)
    with pytest.raises(CheckpointError, match="nope://bucket/ck: cannot open the checkpoint URI"):
        load_model("nope://bucket/ck")
    assert not any(empty_tempdir.iterdir())


@pytest.fixture(scope="module")
def s3():
    with s3_endpoint() as endpoint:
        endpoint.make_bucket("ckpts")
        yield endpoint


def test_loads_from_s3_in_a_fresh_offline_process_and_refuses_a_tampered_object(pretrained_ckpt, s3, tmp_path,
                                                                                empty_tempdir):
    reference, folder = pretrained_ckpt
    s3.upload(folder, "ckpts/run/ck")
    image, boxes = _inputs()
    np.save(tmp_path / "image.npy", image)
    np.save(tmp_path / "boxes.npy", boxes)
    env = {**_offline_env(tmp_path), **s3.env()}  # credentials from the default chain, not the URI
    proc = subprocess.run([sys.executable, "-c", _CHILD, s3.uri("ckpts/run/ck"), str(tmp_path),
                           str(torch.get_num_threads())], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))[len("RESULT "):])
    assert got and got == reference

    recorded = json.loads(s3.read("ckpts/run/ck/meta.json"))["sha256"]["model.safetensors"]
    data = bytearray(s3.read("ckpts/run/ck/model.safetensors"))
    data[-1] ^= 0x01
    s3.write("ckpts/run/ck/model.safetensors", bytes(data))
    with pytest.raises(CheckpointError, match="model.safetensors") as exc:
        load_model(s3.uri("ckpts/run/ck", credentials=True))
    msg = str(exc.value)
    assert recorded in msg and hashlib.sha256(data).hexdigest() in msg
    assert msg.startswith("s3://ckpts/run/ck?") and SECRET not in msg  # the location, without the secret
    assert not any(empty_tempdir.iterdir())


def test_write_calibration_to_s3_replaces_only_calibration_json_fitted_on_the_same_weights(pretrained_ckpt, s3):
    _, folder = pretrained_ckpt
    s3.upload(folder, "ckpts/cal/ck")
    uri = s3.uri("ckpts/cal/ck", credentials=True)
    names = ("config.yaml", "model.safetensors", "text_bank.npz", "meta.json")
    before = {n: s3.read(f"ckpts/cal/ck/{n}") for n in names}
    meta = json.loads(before["meta.json"])
    where = write_calibration(uri, Calibration(2.0, -1.0), expect_meta=meta)
    assert where == s3.uri("ckpts/cal/ck").replace("?", "/calibration.json?")
    assert json.loads(s3.read("ckpts/cal/ck/calibration.json")) == {"a": 2.0, "b": -1.0}
    assert {n: s3.read(f"ckpts/cal/ck/{n}") for n in names} == before  # meta.json's digests still hold
    assert load_checkpoint(uri).calibration == Calibration(2.0, -1.0)
    other = {**meta, "sha256": {**meta["sha256"], "model.safetensors": "0" * 64}}
    with pytest.raises(CheckpointError, match="changed while the calibration was fitted"):
        write_calibration(uri, Calibration(3.0, 0.0), expect_meta=other)
    with pytest.raises(CheckpointError, match="not positive"):
        write_calibration(uri, Calibration(-1.0, 0.0))
    with pytest.raises(CheckpointError, match="not a readable relation checkpoint"):
        write_calibration(s3.uri("ckpts/absent", credentials=True), Calibration(1.0, 0.0))
    assert json.loads(s3.read("ckpts/cal/ck/calibration.json")) == {"a": 2.0, "b": -1.0}
