"""One root for job outputs (relate.storage.under_root / Location) and the refusal of relative paths
inside a job started by `ray job submit`, simulated as Ray sets it up: the job supervisor's
RAY_JOB_CONFIG_JSON_ENV_VAR in the driver, and a working directory inside `_ray_pkg_<hash>`."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from relate.config import ConfigError, load_config
from relate.storage import RelativePathError, in_submitted_job, storage_root, under_root

REPO = Path(__file__).resolve().parents[2]
JOB_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"


@pytest.fixture
def plain(monkeypatch, tmp_path):
    """Not in a job, no root, in a scratch directory."""
    monkeypatch.delenv("RELATE_ROOT", raising=False)
    monkeypatch.delenv(JOB_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def submitted(plain, monkeypatch):
    """The driver of a submitted job: Ray's job config names the submission id, and the working
    directory is the unpacked working_dir package."""
    pkg = plain / "session_x" / "runtime_resources" / "working_dir_files" / "_ray_pkg_0123abcd"
    pkg.mkdir(parents=True)
    monkeypatch.chdir(pkg)
    monkeypatch.setenv(JOB_ENV, json.dumps({"runtime_env": {}, "metadata": {"job_submission_id": "train-x-1",
                                                                                "job_name": "train-x"}}))
    return pkg


def test_paths_outside_a_job(plain, monkeypatch):
    assert under_root("runs/annotated") == "runs/annotated"  # the current directory, as on a laptop
    assert under_root("/data/x") == "/data/x"
    assert under_root("s3://b/runs?endpoint_override=h:9000") == "s3://b/runs?endpoint_override=h:9000"
    assert under_root("~/x") == str(Path("~/x").expanduser())
    monkeypatch.setenv("RELATE_ROOT", "/mnt/shared")
    assert under_root("runs/annotated") == "/mnt/shared/runs/annotated"
    assert under_root("/data/x") == "/data/x" and under_root("gs://b/k") == "gs://b/k"
    monkeypatch.setenv("RELATE_ROOT", "s3://bucket/relate/?endpoint_override=h:9000&scheme=http")
    assert under_root("runs/ray_train") == "s3://bucket/relate/runs/ray_train?endpoint_override=h:9000&scheme=http"
    monkeypatch.setenv("RELATE_ROOT", "shared")
    with pytest.raises(RelativePathError, match="RELATE_ROOT='shared' must be an absolute path or a URI"):
        storage_root()
    monkeypatch.setenv("RELATE_ROOT", "  ")
    assert storage_root() is None


def test_job_detection(plain, monkeypatch):
    assert in_submitted_job() is None
    monkeypatch.setenv(JOB_ENV, json.dumps({"metadata": {}}))  # a driver started by ray.init: no submission
    assert in_submitted_job() is None
    monkeypatch.setenv(JOB_ENV, "not json")
    assert in_submitted_job() is None
    monkeypatch.setenv(JOB_ENV, json.dumps({"metadata": {"job_submission_id": "annotate-a-1"}}))
    assert in_submitted_job() == "submitted job annotate-a-1"
    monkeypatch.delenv(JOB_ENV)
    assert "_ray_pkg_ff" in in_submitted_job(cwd="/tmp/ray/session/runtime_resources/working_dir_files/_ray_pkg_ff/x")
    assert in_submitted_job(cwd="/home/me/ray_pkg_notes") is None


def test_relative_path_in_a_job_is_refused_with_what_to_set(submitted, monkeypatch):
    with pytest.raises(RelativePathError) as err:
        under_root("runs/annotated", what="out_dir")
    msg = str(err.value)
    assert "out_dir 'runs/annotated' is relative" in msg and "submitted job train-x-1" in msg
    assert "Set RELATE_ROOT" in msg and "absolute path or a URI" in msg
    # a worker process of the job: no job config, only the _ray_pkg_ working directory
    monkeypatch.delenv(JOB_ENV)
    with pytest.raises(RelativePathError, match="_ray_pkg_0123abcd"):
        under_root("runs/x")
    assert under_root("/mnt/shared/runs/x") == "/mnt/shared/runs/x" and under_root("s3://b/x") == "s3://b/x"
    monkeypatch.setenv("RELATE_ROOT", "/mnt/shared")
    assert under_root("runs/x") == "/mnt/shared/runs/x"


def test_job_configs_refuse_relative_defaults_in_a_job_and_resolve_them_under_the_root(submitted, monkeypatch):
    from train_jobs.train_relation import TrainRelationConfig

    released = REPO / "train_jobs/configs/released.yaml"
    with pytest.raises(ConfigError) as err:
        load_config(TrainRelationConfig, released)
    msg = str(err.value)
    assert "run.storage_path" in msg and "'runs/ray_train' is relative" in msg and "RELATE_ROOT" in msg
    # absolute paths and URIs pass
    ok = load_config(TrainRelationConfig, released, [
        "run.storage_path=s3://b/ray_train", "data.corpus_root=/mnt/nfs/ra4m",
        "data.text_encoder=student:/mnt/nfs/student"])
    assert ok.run.storage_path == "s3://b/ray_train" and ok.data.corpus_root == "/mnt/nfs/ra4m"
    monkeypatch.setenv("RELATE_ROOT", str(submitted.parent / "shared"))
    cfg = load_config(TrainRelationConfig, released)
    root = str(submitted.parent / "shared")
    assert cfg.run.storage_path == f"{root}/runs/ray_train"
    assert cfg.data.corpus_root.startswith(root + "/") and cfg.data.text_encoder == f"student:{root}/runs/distill_text/student"
    # what the driver hands the workers validates again to the same places
    again = TrainRelationConfig.model_validate(cfg.model_dump(mode="json"))
    assert again.run.storage_path == cfg.run.storage_path


def test_every_submitted_job_lands_under_the_root(submitted, monkeypatch):
    """Each job scripts.submit_job knows: its default (or shipped) config's run-data paths, in a
    job with RELATE_ROOT set, all lie under the root; without it, the config is refused."""
    from eval_jobs.ovsgg import OVSGGConfig
    from pipelines.annotate import AnnotateConfig
    from pipelines.synthetic import SyntheticJobConfig

    root = "/mnt/shared/relate"
    monkeypatch.setenv("RELATE_ROOT", root)
    syn = load_config(SyntheticJobConfig)
    ann = load_config(AnnotateConfig, REPO / "pipelines/configs/annotate_synthetic.yaml")
    ev = load_config(OVSGGConfig, REPO / "eval_jobs/configs/ovsgg_synthetic.yaml")
    assert syn.out_dir == f"{root}/runs/synthetic"
    assert (ann.input_dir, ann.out_dir) == (f"{root}/runs/demo/synthetic", f"{root}/runs/annotated")
    assert ev.out_dir == f"{root}/runs/ovsgg_synthetic" and ev.inference.checkpoint.startswith(root + "/")
    paths = [b.path for b in ev.benchmarks] + [b.detections for b in ev.benchmarks if b.detections]
    paths += [s.train_corpus for s in ev.systems if s.train_corpus]
    assert paths and all(p.startswith(f"{root}/runs/demo/") for p in paths), paths
    monkeypatch.delenv("RELATE_ROOT")
    for cls, path in [(SyntheticJobConfig, None), (AnnotateConfig, "pipelines/configs/annotate_synthetic.yaml"),
                      (OVSGGConfig, "eval_jobs/configs/ovsgg_synthetic.yaml")]:
        with pytest.raises(ConfigError, match="RELATE_ROOT"):
            load_config(cls, REPO / path if path else None)


def test_submit_helper_validates_as_the_job_will(plain, monkeypatch):
    from scripts.submit_job import build_submission, ray_job_submit_argv

    monkeypatch.chdir(REPO)
    released = ["--config", "train_jobs/configs/released.yaml"]
    # cluster/runtime_env.yaml sets RELATE_ROOT for the cluster: the relative defaults are fine
    sub = build_submission("train_jobs.train_relation", released)
    assert sub.metadata["job_name"] == sub.metadata["run"] == "train-released"
    assert sub.runtime_env_spec()["env_vars"]["RELATE_ROOT"] == "/mnt/shared"
    # no runtime_env (hence no root): refused here, before anything is uploaded
    with pytest.raises(ConfigError, match="RELATE_ROOT"):
        build_submission("train_jobs.train_relation", released, runtime_env=None)
    # --root: validated with it, and sent in the runtime_env's env_vars (inline JSON)
    sub = build_submission("train_jobs.train_relation", released, root="/mnt/nfs")
    argv = ray_job_submit_argv(sub)
    spec = json.loads(argv[argv.index("--runtime-env-json") + 1])
    assert spec["env_vars"]["RELATE_ROOT"] == "/mnt/nfs" and spec["working_dir"] == "."
    assert "--runtime-env" not in argv
    assert os.environ.get("RELATE_ROOT") is None and os.environ.get(JOB_ENV) is None  # restored


def test_training_data_setup_runs_in_a_job_with_absolute_paths_and_no_root(submitted, tmp_path):
    """Configs the job builds internally (P(q|p)'s estimator settings) must not trip over their own
    relative defaults: with every configured path absolute and no root, the setup runs in a job."""
    import numpy as np

    from relate.data.synthetic import SyntheticConfig, make_scene
    from relate.schema import CORPUS_SCHEMA, to_table
    from train_jobs.relation_data import DataConfig, _p_cond

    world = SyntheticConfig(seed=1, min_size=64, max_size=96)
    rows = [make_scene(i, world).to_record(f"/data/{i}.png", "train") for i in range(6)]
    train = to_table(rows, CORPUS_SCHEMA)
    strings = sorted({r["predicate"] for row in rows for r in row["relations"]})
    cfg = DataConfig(corpus_root=str(tmp_path / "corpus"), cache_dir=str(tmp_path / "cache"))
    emb = np.random.default_rng(0).normal(size=(len(strings), 8)).astype(np.float32)
    p = _p_cond(cfg, train, strings, emb)
    assert p.shape == (len(strings), len(strings))
