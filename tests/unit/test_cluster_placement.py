"""relate.placement: resource requests by name become arguments Ray itself accepts."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from relate.config import load_config
from relate.placement import (ResourcesConfig, ray_remote_args, scaling_config_kwargs, serve_actor_options,
                              slots_per_node)


def test_cpu_only_request_leaves_gpu_and_custom_keys_out():
    args = ray_remote_args(ResourcesConfig(num_cpus=0.5))
    assert args == {"num_cpus": 0.5}


def test_annotator_request_round_trips_through_ray_option_validation():
    from ray._common import ray_option_utils

    res = ResourcesConfig(num_cpus=1, num_gpus=0.25, resources={"annotator": 0.25}, accelerator_type="L4")
    args = ray_remote_args(res)
    assert args == {"num_cpus": 1, "num_gpus": 0.25, "resources": {"annotator": 0.25}, "accelerator_type": "L4"}
    ray_option_utils.validate_task_options(args, in_options=False)  # what @ray.remote(**args) checks
    ray_option_utils.validate_actor_options(serve_actor_options(res), in_options=False)
    args["resources"]["annotator"] = 9  # the helper returns a copy, never the config's own dict
    assert res.resources == {"annotator": 0.25}


def test_trainer_request_builds_a_scaling_config():
    from ray.train import ScalingConfig

    res = ResourcesConfig(num_cpus=8, num_gpus=1, resources={"trainer": 1}, accelerator_type="A100")
    kwargs = scaling_config_kwargs(res, num_workers=4)
    assert kwargs["use_gpu"] is True
    assert kwargs["resources_per_worker"] == {"CPU": 8, "GPU": 1, "trainer": 1}
    sc = ScalingConfig(**kwargs)
    assert sc.num_workers == 4 and sc.accelerator_type == "A100"
    cpu = scaling_config_kwargs(ResourcesConfig(num_cpus=0.75), num_workers=2)
    assert cpu["use_gpu"] is False and "GPU" not in cpu["resources_per_worker"]
    ScalingConfig(**cpu)
    with pytest.raises(ValueError, match="num_workers=0"):
        scaling_config_kwargs(res, num_workers=0)


@pytest.mark.parametrize("bad,match", [
    ({"num_gpus": 1.5}, "whole numbers"),
    ({"num_cpus": -1}, "num_cpus"),
    ({"resources": {"GPU": 1}}, "own field"),
    ({"resources": {"annotator": 0}}, "must be > 0"),
    ({"resources": {"annotator": 2.5}}, "whole numbers"),
    ({"resources": {"accelerator_type:A100": 0.001}}, "accelerator_type instead"),
    ({"accelerator_type": "A1OO", "num_gpus": 1}, "valid:"),
    ({"accelerator_type": "A100"}, "num_gpus=0"),
    ({"num_gpu": 1}, "num_gpu"),
])
def test_bad_requests_are_rejected_with_the_reason(bad, match):
    with pytest.raises(ValidationError, match=match):
        ResourcesConfig(**bad)


def test_loaded_from_yaml_with_overrides(tmp_path):
    path = tmp_path / "res.yaml"
    path.write_text("num_cpus: 2\nnum_gpus: 0.5\nresources: {annotator: 0.5}\n")
    res = load_config(ResourcesConfig, path, ["num_gpus=1", "resources.annotator=1"])
    assert ray_remote_args(res) == {"num_cpus": 2, "num_gpus": 1, "resources": {"annotator": 1}}


def test_slots_per_node_counts_the_binding_resource():
    node = {"CPU": 8, "GPU": 1, "annotator": 1, "accelerator_type:L40S": 1}
    assert slots_per_node(ResourcesConfig(num_cpus=1, num_gpus=0.25, resources={"annotator": 0.25}), node) == 4
    assert slots_per_node(ResourcesConfig(num_cpus=4, num_gpus=0.25), node) == 2  # CPUs bind first
    assert slots_per_node(ResourcesConfig(num_cpus=1, num_gpus=1, accelerator_type="A100"), node) == 0
    assert slots_per_node(ResourcesConfig(num_cpus=1, num_gpus=1, accelerator_type="L40S"), node) == 1
    assert slots_per_node(ResourcesConfig(num_cpus=1, resources={"trainer": 1}), node) == 0
