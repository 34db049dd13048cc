"""The relation train job with ``run.storage_path`` an ``s3://`` URI, end to end, against a real S3
endpoint (moto's server on 127.0.0.1; tests/_s3_endpoint.py) that the driver, the Train controller
and both DDP workers reach over HTTP through pyarrow.

One short run covers what a cluster run on a bucket does: checkpoints written to the bucket, the
fault drill (marker and snapshot read on the bucket) and resumption from a checkpoint downloaded
from it, rank 0's progress.log as an object, the Platt map fitted and written into the final
checkpoint in the bucket, then a fresh offline process loading that checkpoint by URI (digests
verified) and refusing it once a file in the bucket is changed.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from _s3_endpoint import KEY, SECRET, s3_endpoint
from relate.config import load_config

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "train_jobs" / "configs" / "cpu_small.yaml"
BUCKET = "relate-runs"

_CHILD = """
import json, sys
from relate.api import load_model
from relate.checkpoint import CheckpointError
try:
    p = load_model(sys.argv[1])
except CheckpointError as exc:
    print("REFUSED " + str(exc))
else:
    print("LOADED " + json.dumps({"a": p.calibration.a, "b": p.calibration.b, "vocabulary": len(p.vocabulary)}))
"""


@pytest.fixture(scope="module")
def s3():
    with s3_endpoint() as endpoint:
        endpoint.make_bucket(BUCKET)
        yield endpoint


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The small synthetic corpus of tests/ray/test_train_relation.py."""
    from relate.data.synthetic import SyntheticConfig
    from relate.data.synthetic_corpus import write_corpus

    world = SyntheticConfig(num_scenes=40, min_size=64, max_size=96, max_objects=6)
    return write_corpus(tmp_path_factory.mktemp("synth"), world, lambda i: "val" if i % 5 == 0 else "train")


def _cfg(corpus: Path, storage: str, cache: Path, name: str, **run):
    """The tiny recipe of tests/ray/test_train_relation.py, with storage on a URI."""
    from train_jobs.train_relation import TrainRelationConfig

    over = [f"data.corpus_root={corpus}", f"run.storage_path={storage}", f"run.name={name}", "run.unique_name=false",
            "model.backbone.img_size=32", "model.backbone.depth=2", "model.backbone.taps=[-2, -1]",
            "model.dim=32", "model.scene_grid=2", "model.sampler.geometry_keep=24", "model.sampler.learned_keep=12",
            "data.rungs=[1.0]", "optim.batch_size=4", "optim.max_steps=4", "optim.warmup_steps=2",
            "run.checkpoint_every=2", "run.val_images=8", "run.evaluate_test=false", "run.log_every=1",
            "run.worker.num_cpus=0.5", f"data.cache_dir={cache}", "data.source_scopes.synthetic=observed"]
    over += [f"run.{k}={v}" for k, v in run.items()]
    return load_config(TrainRelationConfig, CONFIG, over)


def _load_in_fresh_process(uri: str, s3, tmp: Path) -> str:
    """``relate.api.load_model(uri)`` in a new process: hub offline, credentials from the environment."""
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env.update(s3.env(), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HOME=str(tmp / "hf"),
               PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", _CHILD, uri], cwd=tmp, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return next(x for x in proc.stdout.splitlines() if x.startswith(("LOADED ", "REFUSED ")))


@pytest.mark.slow
def test_training_on_s3_storage_resumes_calibrates_and_loads_offline_by_uri(ray_session, corpus, s3, tmp_path,
                                                                             monkeypatch):
    from train_jobs.train_relation import main, progress_file

    monkeypatch.chdir(tmp_path)  # a URI mistaken for a relative path would show up as a folder here
    storage = s3.uri(f"{BUCKET}/runs", credentials=True)  # reaches the Ray workers with the run config
    res = main(_cfg(corpus, storage, tmp_path / "cache", "s3run", kill_worker_at_step=3, max_failures=1))

    # the drill killed a worker (its marker is in the bucket) and the run resumed from the bucket's step-2 checkpoint
    assert s3.read(f"{BUCKET}/runs/s3run/.fault_drill_done")
    assert res.metrics["step"] == 4 and res.metrics["resumed_from_step"] == 2
    # the result names the checkpoint as a URI of storage_path's form, without the inline secret
    prefix = f"s3://{BUCKET}/runs/s3run/checkpoint_"
    assert res.checkpoint.startswith(prefix) and res.checkpoint.endswith(f"?scheme=http&endpoint_override="
                                                                         f"{s3.host_port}&region=us-east-1")
    assert KEY not in res.checkpoint and SECRET not in res.checkpoint
    key = f"{BUCKET}/runs/s3run/{res.checkpoint[len(prefix) - len('checkpoint_'):].split('?')[0]}"
    assert os.listdir(tmp_path) == ["cache"]  # nothing of the run was written locally
    log = s3.read(f"{BUCKET}/runs/s3run/progress.log").decode().splitlines()
    steps = [line.split()[1] for line in log if line.startswith("step ")]
    assert steps[0] == "1/4" and steps[-2:] == ["3/4", "4/4"]  # kept across the restart
    from pyarrow import fs as pafs

    events = s3.filesystem().get_file_info(pafs.FileSelector(f"{BUCKET}/runs/s3run/tensorboard"))
    assert any("tfevents" in e.base_name and e.size > 0 for e in events)  # copied up from the local writer
    assert progress_file(storage, "s3run") == f"s3://{BUCKET}/runs/s3run/progress.log?" + storage.split("?")[1]

    # the Platt map was fitted on val and written into the bucket's checkpoint; the digests still hold
    cal = res.calibration
    assert cal["installed"] and cal["a"] > 0 and cal["checkpoint"] == res.checkpoint
    assert json.loads(s3.read(f"{key}/calibration.json")) == {"a": cal["a"], "b": cal["b"]}
    assert json.loads(s3.read(f"{key}/calibration/calibration_report.json"))["a"] == cal["a"]
    meta = json.loads(s3.read(f"{key}/meta.json"))
    for name, digest in meta["sha256"].items():
        assert hashlib.sha256(s3.read(f"{key}/{name}")).hexdigest() == digest, name

    loaded = json.loads(_load_in_fresh_process(res.checkpoint, s3, tmp_path).removeprefix("LOADED "))
    assert loaded["a"] == cal["a"] and loaded["b"] == cal["b"] and loaded["vocabulary"] > 0

    bank = bytearray(s3.read(f"{key}/text_bank.npz"))
    bank[len(bank) // 2] ^= 0x01
    s3.write(f"{key}/text_bank.npz", bytes(bank))
    refused = _load_in_fresh_process(res.checkpoint, s3, tmp_path)
    assert refused.startswith(f"REFUSED {res.checkpoint}: text_bank.npz has sha256 {hashlib.sha256(bank).hexdigest()}")
    assert meta["sha256"]["text_bank.npz"] in refused and "changed after saving" in refused
