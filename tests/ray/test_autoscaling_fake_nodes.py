"""Autoscaling proven on this machine: Ray's autoscaler, with the node groups of cluster/aws.yaml,
adds nodes of the group that advertises what a job asks for and removes them when idle.

The autoscaler runs as it does on a cluster (`ray start --head --autoscaling-config=...`, monitor
process on the head), but with Ray's fake multi-node provider, which starts each "instance" as a
set of node processes on this machine (RAY_FAKE_CLUSTER=1). The autoscaling config is built from
cluster/aws.yaml itself: every worker group keeps its name, min_workers, custom resources,
accelerator and GPU counts; its CPUs become 1 (the requests below keep their share of a node's
CPUs), max_workers is capped at 2 and idle_timeout_minutes is 0.25 instead of 10. gcp.yaml and the
KubeRay RayCluster must advertise the same custom resources per group, so this holds for them too.

The head is ours (own temp dir, own process group, killed by PID afterwards; never `ray stop`,
which is what ray.cluster_utils.AutoscalingCluster runs and would stop every Ray on the host).
Demand comes from the shipped configs: the annotation engine request of
pipelines/configs/annotate_gpu.yaml (four engines, two per annotate node) and the Train placement
group of train_jobs/configs/released.yaml's worker (two workers, each `trainer` 1 + GPU 1).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from _ray_local_cluster import REPO, LocalCluster

pytestmark = pytest.mark.slow

IDLE_MINUTES = 0.25
MAX_PER_GROUP = 2
NODE_CPUS = 1
OBJECT_STORE = 80 * 2**20


HELD_S = 2.0  # a node count seen for less than this is a node coming or going, not a scaling decision


def _held(samples: list, until: float) -> list[tuple[float, float, dict]]:
    """(start, seconds held, counts) of each sampled node count, the last one held until ``until``."""
    ends = [t for t, _ in samples[1:]] + [until]
    return [(t, end - t, c) for (t, c), end in zip(samples, ends)]


def _cloud_groups() -> tuple[dict, dict]:
    """aws.yaml's head resources and worker groups, as deployed."""
    cfg = yaml.safe_load((REPO / "cluster" / "aws.yaml").read_text())
    types = cfg["available_node_types"]
    head = types[cfg["head_node_type"]]
    return cfg, {"head": head, **{k: v for k, v in types.items() if k != cfg["head_node_type"]}}


def _custom(res: dict) -> set[str]:
    return {k for k in res if k not in ("CPU", "GPU") and not k.startswith("accelerator_type:")}


def fake_autoscaling_config(gcs_address: str) -> tuple[dict, dict]:
    """The autoscaling config for Ray's fake multi-node provider, derived from cluster/aws.yaml;
    also returns each group's scaled per-node resources (what its fake nodes advertise)."""
    cfg, groups = _cloud_groups()
    head = groups.pop("head")
    scaled = {name: {**g["resources"], "CPU": NODE_CPUS} for name, g in groups.items()}
    types = {name: {"resources": {**scaled[name], "object_store_memory": OBJECT_STORE}, "node_config": {},
                    "min_workers": g.get("min_workers", 0), "max_workers": min(g["max_workers"], MAX_PER_GROUP)}
             for name, g in groups.items()}
    # the fake provider names its head type ray.head.default
    types["ray.head.default"] = {"resources": head["resources"], "node_config": {}, "max_workers": 0}
    config = {
        "cluster_name": "relate-fake", "max_workers": MAX_PER_GROUP * len(groups),
        "upscaling_speed": cfg["upscaling_speed"], "idle_timeout_minutes": IDLE_MINUTES,
        # "external" + the module: the wheel lacks the fake provider's defaults file (example.yaml)
        "provider": {"type": "external", "module": "ray.autoscaler._private.fake_multi_node.node_provider.FakeMultiNodeProvider",
                     "gcs_address": gcs_address, "use_node_id_as_ip": True, "disable_node_updaters": True,
                     "disable_launch_config_check": True,
                     "launch_multiple": True},  # a launch of n nodes starts n (else one per update)
        "available_node_types": types, "head_node_type": "ray.head.default",
        "auth": {}, "docker": {}, "file_mounts": {}, "cluster_synced_files": [], "file_mounts_sync_continuously": False,
        "rsync_exclude": [], "rsync_filter": [], "initialization_commands": [], "setup_commands": [],
        "head_setup_commands": [], "worker_setup_commands": [], "head_start_ray_commands": [],
        "worker_start_ray_commands": [],
    }
    return config, scaled


def _scaled_request(res, home: str) -> dict:
    """A shipped ResourcesConfig with its CPUs scaled to the same share of a 1-CPU fake node as
    of a node of its home group in aws.yaml."""
    from relate.placement import ray_remote_args

    cloud_cpus = _cloud_groups()[1][home]["resources"]["CPU"]
    args = ray_remote_args(res)
    args["num_cpus"] = math.floor(res.num_cpus / cloud_cpus * NODE_CPUS * 1e4) / 1e4
    assert 0 < args["num_cpus"] <= NODE_CPUS
    return args


def test_cloud_groups_agree_on_what_each_group_advertises():
    """The fake cluster is built from aws.yaml; gcp.yaml and the KubeRay RayCluster advertise the
    same custom resources per group, so the scheduling proven below is theirs too."""
    _, aws = _cloud_groups()
    gcp = yaml.safe_load((REPO / "cluster" / "gcp.yaml").read_text())["available_node_types"]
    raycluster = yaml.safe_load((REPO / "cluster" / "kuberay" / "raycluster.yaml").read_text())["spec"]
    kuberay = {g["groupName"]: json.loads(json.loads(g["rayStartParams"].get("resources", '"{}"')))
               for g in raycluster["workerGroupSpecs"]}
    assert set(kuberay) <= set(aws), sorted(kuberay)
    for name, g in aws.items():
        assert _custom(gcp[name]["resources"]) == _custom(g["resources"]), name
        if name in kuberay:
            assert _custom(kuberay[name]) == _custom(g["resources"]), name
    assert {"annotator", "trainer"} <= set().union(*(_custom(g["resources"]) for g in aws.values()))


@pytest.mark.timeout(900)
def test_autoscaler_adds_the_advertising_group_on_demand_and_removes_idle_nodes():
    from pipelines.annotate import AnnotateConfig
    from relate.config import load_config
    from relate.placement import scaling_config_kwargs
    from train_jobs.train_relation import TrainRelationConfig

    engine_res = load_config(AnnotateConfig, REPO / "pipelines/configs/annotate_gpu.yaml").generate.resources
    worker_res = load_config(TrainRelationConfig, REPO / "train_jobs/configs/released.yaml").run.worker
    assert engine_res.resources.get("annotator") and worker_res.resources.get("trainer")

    cluster = LocalCluster(head_cpus=0, dashboard=False)
    config, scaled = fake_autoscaling_config(cluster.address)
    home_annotate = [g for g, r in scaled.items() if "annotator" in r]
    home_train = [g for g, r in scaled.items() if "trainer" in r]
    assert home_annotate == ["annotate"] and home_train == ["a100"]
    engine = _scaled_request(engine_res, "annotate")
    per_node = math.floor(min(scaled["annotate"]["annotator"] / engine_res.resources["annotator"],
                              scaled["annotate"]["GPU"] / engine_res.num_gpus))
    engines = per_node * MAX_PER_GROUP  # exactly enough to need every node the group may have
    train = scaling_config_kwargs(worker_res, num_workers=2)
    train.pop("num_workers")
    train["resources_per_worker"]["CPU"] = _scaled_request(worker_res, "a100")["num_cpus"]
    idle_s = IDLE_MINUTES * 60

    cfg_path = cluster.root / "autoscaling.yaml"
    cfg_path.write_text(yaml.safe_dump(config))
    cluster.head_args = ["--autoscaling-config", str(cfg_path)]
    cluster.env.update({"RAY_FAKE_CLUSTER": "1", "AUTOSCALER_UPDATE_INTERVAL_S": "1",
                        "RAY_enable_autoscaler_v2": "0",
                        # fake nodes bind the loopback address, like the head, not the host's
                        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"})
    spec = {"address": cluster.address, "groups": {"head": {"CPU": 0}, **scaled}, "engine": engine, "engines": engines,
            "train_worker": train, "num_workers": 2, "hold_s": 6.0, "phase_timeout_s": 240,
            "idle_timeout_s": idle_s + 150}
    spec_path = cluster.root / "spec.json"
    spec_path.write_text(json.dumps(spec))
    try:
        cluster.start_head()
        env = {k: v for k, v in cluster.env.items() if k != "RAY_FAKE_CLUSTER"}
        proc = subprocess.run([sys.executable, str(Path(__file__).with_name("_autoscale_driver.py")), str(spec_path)],
                              capture_output=True, text=True, timeout=840, env=env, cwd=str(REPO))
        monitor = (cluster.root / "ray0" / "session_latest" / "logs" / "monitor.log")
        tail = monitor.read_text()[-3000:] if monitor.exists() else "(no monitor.log)"
        assert proc.returncode == 0, f"{proc.stderr[-4000:]}\nmonitor.log:\n{tail}"
    finally:
        cluster.close()
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    ev, samples = out["events"], out["samples"]
    print("\nnode counts over time (s since driver start):")
    for t, c in samples:
        print(f"  {t:7.1f}  {c}")
    print({k: v for k, v in ev.items() if k != "annotate_ran_on"})

    assert ev["start"] == {"head": 1}  # every group starts at zero
    assert ev["node_addresses"] == ["127.0.0.1"], ev  # the fake nodes listen on loopback only
    groups_seen = set().union(*(c for _, c in samples))
    assert not {g for g in groups_seen if g.startswith("unknown")}, groups_seen
    # annotation demand: only the annotate group grew, to exactly the nodes four engines need. The
    # count is the one held for HELD_S or more: under load the fake provider has shown a third
    # node alive for half a second (a node coming up as another goes) while the autoscaler held
    # two; a decision to run three would hold through the engines' 6 s and still fail here.
    held = _held(samples, samples[-1][0] + HELD_S)
    assert max(c.get("annotate", 0) for t, d, c in held if t <= ev["annotate_scaled_down"] and d >= HELD_S) \
        == MAX_PER_GROUP, held
    assert all(set(c) <= {"head", "annotate"} for t, c in samples if t <= ev["annotate_scaled_down"]), samples
    assert ev["annotate_ran_on_groups"] == ["annotate"], ev
    # idle nodes removed: back to the head alone, not before the idle timeout
    assert ev["annotate_scaled_down"] - ev["annotate_done"] >= idle_s - 2, ev
    # training demand: the placement group waits for the a100 group, then gets both workers there
    assert ev["train_ready_at_once"] is False and ev["train_workers"] == 2, ev
    assert ev["train_ran_on_groups"] == ["a100"], ev
    train_counts = [c for t, c in samples if ev["train_submitted"] <= t <= ev["train_released"]]
    # eight `trainer` units per node: one node for two workers (held counts, as above)
    assert max(c.get("a100", 0) for t, d, c in held
               if ev["train_submitted"] <= t <= ev["train_released"] and d >= HELD_S) == 1, held
    assert all(set(c) <= {"head", "a100"} for c in train_counts), train_counts
    assert ev["train_scaled_down"] - ev["train_released"] >= idle_s - 2, ev
