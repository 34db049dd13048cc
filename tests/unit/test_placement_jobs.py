"""Jobs ask for resources by name from their configs: what reaches Ray's own arguments (no Ray started)."""

from __future__ import annotations

from pathlib import Path

import pytest

from relate.config import ConfigError, load_config

REPO = Path(__file__).resolve().parents[2]


class _RecordingDataset:
    """Stands in for a Ray Dataset: records each map_batches call (Ray itself is not started)."""

    def __init__(self) -> None:
        self.calls: list[tuple[object, dict]] = []

    def map_batches(self, fn, **kwargs):
        self.calls.append((fn, kwargs))
        return self


def test_annotation_stages_carry_the_configured_resources():
    from ray._common import ray_option_utils

    from pipelines.annotate import AnnotateConfig, PassesStage, build_annotation

    cfg = load_config(AnnotateConfig, REPO / "pipelines/configs/annotate_synthetic.yaml",
                      ["generate.resources.num_gpus=0.25", "generate.resources.resources={annotator: 0.25}",
                       "cpu_resources.num_cpus=0.5"])
    ds = _RecordingDataset()
    build_annotation(ds, cfg)
    gen = [kw for fn, kw in ds.calls if fn is PassesStage]
    assert len(gen) == 1
    assert gen[0]["num_gpus"] == 0.25 and gen[0]["resources"] == {"annotator": 0.25} and gen[0]["num_cpus"] == 0.5
    cpu = [kw for fn, kw in ds.calls if fn is not PassesStage]
    assert cpu and all(kw["num_cpus"] == 0.5 and "num_gpus" not in kw and "resources" not in kw for kw in cpu)
    ray_option_utils.validate_actor_options({k: gen[0][k] for k in ("num_cpus", "num_gpus", "resources")},
                                            in_options=False)


def test_vllm_annotation_needs_a_gpu_and_gets_the_annotator_bundle():
    from actors.vlm.vllm_data import build_vllm_processor_config
    from pipelines.annotate import AnnotateConfig

    cfg = load_config(AnnotateConfig, REPO / "pipelines/configs/annotate_gpu.yaml")
    pc = build_vllm_processor_config(cfg.vlm.vllm, cfg.generate.resources)
    bundle = pc.placement_group_config["bundle_per_worker"]
    assert bundle["GPU"] == cfg.generate.resources.num_gpus == 0.5
    assert bundle["annotator"] == 0.5 and bundle["CPU"] == 2
    with pytest.raises(ConfigError, match="generate.resources.num_gpus"):
        load_config(AnnotateConfig, REPO / "pipelines/configs/annotate_gpu.yaml", ["generate.resources.num_gpus=0"])
    clash = cfg.generate.resources.model_copy(update={"accelerator_type": "L4"})
    with pytest.raises(ValueError, match="disagrees"):
        build_vllm_processor_config(cfg.vlm.vllm.model_copy(update={"accelerator_type": "H100"}), clash)


@pytest.mark.parametrize("config,gpu,custom", [("released.yaml", True, {"trainer": 1.0}),
                                               ("cpu_small.yaml", False, {})])
def test_training_scaling_config_from_the_run_block(config, gpu, custom):
    from ray.train import ScalingConfig

    from relate.placement import scaling_config_kwargs
    from train_jobs.train_relation import TrainRelationConfig

    cfg = load_config(TrainRelationConfig, REPO / "train_jobs/configs" / config)
    kwargs = scaling_config_kwargs(cfg.run.worker, cfg.run.num_workers)
    sc = ScalingConfig(**kwargs)
    assert sc.use_gpu is gpu and sc.num_workers == cfg.run.num_workers
    per = sc.resources_per_worker
    assert {k: v for k, v in per.items() if k not in ("CPU", "GPU")} == custom
    assert per.get("GPU", 0) == (1 if gpu else 0)
    if not gpu:
        assert 0 < per["CPU"] < 1  # fractional: the CPU recipe leaves room for Ray Data on 2 cores


def test_training_rejects_gpu_fractions_and_takes_drills_on_any_storage():
    from train_jobs.train_relation import TrainRelationConfig

    path = REPO / "train_jobs/configs/released.yaml"
    with pytest.raises(ConfigError, match="exactly one"):
        load_config(TrainRelationConfig, path, ["run.worker.num_gpus=0.5"])
    # the fault drill runs on any storage: its marker and the snapshot it waits for go through pyarrow.fs
    assert load_config(TrainRelationConfig, path, ["run.storage_path=s3://bucket/runs",
                                                    "run.kill_worker_at_step=3"]).run.kill_worker_at_step == 3
    with pytest.raises(ConfigError, match="use_gpu"):  # the old field is gone, loudly
        load_config(TrainRelationConfig, path, ["run.use_gpu=true"])


def test_storage_path_resolves_local_folders_and_keeps_uris(tmp_path, monkeypatch):
    from train_jobs.train_relation import progress_file, resolve_storage_path

    monkeypatch.chdir(tmp_path)
    assert resolve_storage_path("runs/ray_train") == str(tmp_path / "runs" / "ray_train")
    assert resolve_storage_path("~/x").startswith(str(Path.home()))
    for uri in ("s3://bucket/runs/ray_train", "gs://bucket/r", "abfss://c@acct.dfs.core.windows.net/r"):
        assert resolve_storage_path(uri) == uri  # Path(...).resolve() used to turn it into <cwd>/s3:/bucket/...
    assert progress_file(str(tmp_path), "mn") == str(tmp_path / "mn" / "progress.log")
    assert progress_file("runs/ray_train", "mn") == str(tmp_path / "runs" / "ray_train" / "mn" / "progress.log")
    # on an object store the log is an object in the run folder; the printed location drops inline secrets
    assert progress_file("s3://K:S@bucket/runs?endpoint_override=h:9000&scheme=http", "mn") == \
        "s3://bucket/runs/mn/progress.log?endpoint_override=h:9000&scheme=http"


def test_storage_locations_keep_scheme_and_query_and_drop_inline_credentials():
    from relate.storage import join, redact, uri_for

    storage = "s3://K:S@bucket/runs?endpoint_override=127.0.0.1:9000&scheme=http"
    assert join(storage, "r", "/checkpoint_1/") == \
        "s3://K:S@bucket/runs/r/checkpoint_1?endpoint_override=127.0.0.1:9000&scheme=http"
    assert join("s3://bucket", "a") == "s3://bucket/a" and join("/x/y", "a", "b") == "/x/y/a/b"
    assert redact(storage) == "s3://bucket/runs?endpoint_override=127.0.0.1:9000&scheme=http"
    assert redact("/local/K:S@x") == "/local/K:S@x"
    assert redact("abfss://container@acct.dfs.core.windows.net/r") == "abfss://container@acct.dfs.core.windows.net/r"
    assert uri_for(storage, "bucket/runs/r/checkpoint_1") == \
        "s3://bucket/runs/r/checkpoint_1?endpoint_override=127.0.0.1:9000&scheme=http"
    with pytest.raises(ValueError, match="not under the storage root 'bucket/runs'"):
        uri_for(storage, "other/runs/r")


def test_eval_jobs_take_resources_from_config():
    from eval_jobs.judge import JudgeJobConfig
    from eval_jobs.ovsgg import OVSGGConfig
    from eval_jobs.triplet_probe import TripletProbeConfig
    from relate.placement import ray_remote_args

    ovsgg = load_config(OVSGGConfig, REPO / "eval_jobs/configs/ovsgg.yaml")
    assert ray_remote_args(ovsgg.inference.resources) == {"num_cpus": 4, "num_gpus": 1, "resources": {"evaluator": 1}}
    probe = load_config(TripletProbeConfig, REPO / "eval_jobs/configs/triplet_probe.yaml")
    assert probe.task.remote_args(cluster_gpus=0) == {"num_cpus": 4, "num_gpus": 1, "resources": {"evaluator": 1}}
    demo = load_config(TripletProbeConfig, REPO / "eval_jobs/configs/triplet_probe_synthetic.yaml")
    # num_gpus 0 with gpu_when_available: one GPU per model task where the cluster has GPUs, none otherwise
    assert demo.task.remote_args(cluster_gpus=0) == {"num_cpus": 0.5}
    assert demo.task.remote_args(cluster_gpus=8) == {"num_cpus": 0.5, "num_gpus": 1.0}
    off = load_config(TripletProbeConfig, REPO / "eval_jobs/configs/triplet_probe_synthetic.yaml",
                      ["task.gpu_when_available=false"])
    assert off.task.remote_args(cluster_gpus=8) == {"num_cpus": 0.5}
    judge = load_config(JudgeJobConfig, REPO / "eval_jobs/configs/judge_synthetic.yaml",
                        ["resources.num_gpus=1", "resources.resources={evaluator: 1}"])
    assert ray_remote_args(judge.resources) == {"num_cpus": 1.0, "num_gpus": 1, "resources": {"evaluator": 1}}
    with pytest.raises(ConfigError, match="num_gpus_per_task"):
        load_config(JudgeJobConfig, REPO / "eval_jobs/configs/judge_synthetic.yaml", ["num_gpus_per_task=1"])


def test_serve_replicas_use_the_placement_rules():
    from pydantic import ValidationError

    from serve_apps.config import DeploymentOptions

    assert DeploymentOptions(num_cpus=2, num_gpus=0.25).serve_options()["ray_actor_options"] == \
        {"num_cpus": 2, "num_gpus": 0.25}
    assert DeploymentOptions(num_cpus=0.5).serve_options()["ray_actor_options"] == {"num_cpus": 0.5}
    with pytest.raises(ValidationError, match="whole numbers"):
        DeploymentOptions(num_gpus=1.5)


def test_text_distillation_workers_are_cpu_only():
    from pydantic import ValidationError

    from relate.placement import scaling_config_kwargs
    from train_jobs.distill_text import DistillTextConfig

    cfg = load_config(DistillTextConfig, REPO / "train_jobs/configs/distill_text.yaml")
    kwargs = scaling_config_kwargs(cfg.scaling.worker, cfg.scaling.num_workers)
    assert kwargs["use_gpu"] is False and kwargs["resources_per_worker"] == {"CPU": cfg.scaling.worker.num_cpus}
    with pytest.raises(ValidationError, match="trains on CPU"):
        DistillTextConfig(scaling={"worker": {"num_gpus": 1}})
