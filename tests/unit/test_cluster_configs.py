"""Every file under cluster/ validated without a cloud account or a Kubernetes cluster.

- Launcher YAMLs: Ray's own JSON schema (ray/autoscaler/ray-schema.json from the installed ray)
  through jsonschema, then Ray's own prepare/validate path that `ray up` runs before it talks to
  the cloud; plus the properties the issue asks for (CPU head, A100 group, spot annotation group
  at min 0, custom resources, idle timeout, images matching the installed Ray).
- runtime_env.yaml: only working_dir and env vars (no plugin that builds an environment on a node).
- KubeRay manifests: a compact schema of the RayCluster / RayJob / RayService spec fields we use,
  transcribed from KubeRay's CRDs (ray-project/kuberay, ray-operator/config/crd/bases/
  ray.io_{rayclusters,rayjobs,rayservices}.yaml, apiVersion ray.io/v1, at commit
  feeaf72facab4881ba2b179248bb67315634e229); unknown or mistyped fields are errors.
- Every module, config file and path the configs and cluster/README.md name exists.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import re
import shlex
import tomllib
from pathlib import Path

import jsonschema
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "cluster"
LAUNCHERS = ["aws.yaml", "gcp.yaml"]
KUBERAY = {"raycluster.yaml": "RayCluster", "rayjob-train.yaml": "RayJob", "rayservice.yaml": "RayService"}
RAY_VERSION = importlib.metadata.version("ray")
IMAGES = {"cpu": "relate-platform:0.1.0-cpu", "gpu": "relate-platform:0.1.0-gpu"}  # built from cluster/Dockerfile.<kind>


def _load(name: str) -> dict:
    return yaml.safe_load((CLUSTER / name).read_text())


def _ray_schema() -> dict:
    # Found in the installed package without importing ray (unit tier).
    spec = importlib.util.find_spec("ray")
    path = Path(spec.submodule_search_locations[0]) / "autoscaler" / "ray-schema.json"
    return json.loads(path.read_text())


# ----------------------------------------------------------------------------- launcher configs

@pytest.mark.parametrize("name", LAUNCHERS)
def test_launcher_config_matches_ray_schema(name):
    jsonschema.validate(_load(name), _ray_schema())


def test_ray_schema_rejects_what_it_should():
    bad = _load("aws.yaml")
    bad["available_node_types"]["annotate"]["resources"]["annotator"] = 0.5  # Ray wants integers
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, _ray_schema())
    bad = _load("gcp.yaml")
    bad["available_node_types"]["a100"]["min_worker"] = 0  # misspelt key
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, _ray_schema())


@pytest.mark.parametrize("name", LAUNCHERS)
def test_launcher_config_passes_ray_up_preparation(name):
    from ray.autoscaler._private.util import prepare_config, validate_config

    prepared = prepare_config(_load(name))  # defaults merged, docker and worker bounds checked
    validate_config(prepared)
    assert prepared["head_node_type"] == "head"


@pytest.mark.parametrize("name", LAUNCHERS)
def test_launcher_node_groups(name):
    cfg = _load(name)
    types = cfg["available_node_types"]
    assert types[cfg["head_node_type"]]["resources"] == {"CPU": 0}  # head schedules no work
    a100, annotate = types["a100"], types["annotate"]
    assert a100["resources"]["GPU"] >= 1 and a100["resources"]["trainer"] == a100["resources"]["GPU"]
    assert a100["resources"]["evaluator"] == a100["resources"]["GPU"]
    assert "accelerator_type:A100" in a100["resources"]
    assert annotate["min_workers"] == 0 and annotate["resources"]["annotator"] == annotate["resources"]["GPU"]
    assert not any(k.startswith("accelerator_type:A100") for k in annotate["resources"])  # cheaper GPUs
    assert all(t.get("min_workers", 0) == 0 for k, t in types.items() if k != "head")
    assert 0 < cfg["idle_timeout_minutes"] <= 30
    node = annotate["node_config"]
    if cfg["provider"]["type"] == "aws":
        assert node["InstanceMarketOptions"]["MarketType"] == "spot"
    else:
        assert node["scheduling"]["provisioningModel"] == "SPOT"
        # Ray's GCP provider treats a top-level acceptorType as a TPU request.
        assert all("acceleratorType" not in t["node_config"] for t in types.values())


def _dockerfile(kind: str) -> str:
    return (CLUSTER / f"Dockerfile.{kind}").read_text()


def test_dockerfiles_build_the_project_on_the_ray_version_with_the_right_extras():
    cpu, gpu = _dockerfile("cpu"), _dockerfile("gpu")
    assert re.search(rf"^FROM rayproject/ray:{re.escape(RAY_VERSION)}-py311-cpu$", cpu, re.M)
    assert re.search(rf"^FROM rayproject/ray:{re.escape(RAY_VERSION)}-py311-cu\d+$", gpu, re.M)
    assert 'pip install --no-cache-dir -e ".[gpu]"' in gpu and "[gpu]" not in cpu  # vLLM only where GPUs are
    assert "download.pytorch.org/whl/cpu" in cpu  # CPU torch wheels, not the CUDA ones
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "gpu" in extras
    for text in (cpu, gpu):
        assert "WORKDIR /home/ray/relate" in text
        for src in re.findall(r"^COPY --chown=\S+ (\S+) ", text, re.M):
            assert (REPO / src).exists(), src


# NVIDIA's minimum Linux driver branch per CUDA toolkit (CUDA release notes, "CUDA Toolkit and
# Corresponding Driver Versions"): the CUDA a driver branch runs.
DRIVER_CUDA = {525: (12, 0), 530: (12, 1), 535: (12, 2), 545: (12, 3), 550: (12, 4), 555: (12, 5), 560: (12, 6),
               570: (12, 8), 575: (12, 9), 580: (13, 0), 590: (13, 1), 595: (13, 2)}


def _cuda_of_driver(branch: int) -> tuple[int, int]:
    return DRIVER_CUDA[max(b for b in DRIVER_CUDA if b <= branch)]


def test_gpu_image_cuda_runs_on_the_pinned_driver():
    """The GPU image's CUDA (its base's toolkit and the runtime the torch wheels bring, as this
    venv installs them) is no newer than what the driver the GPU node images pin supports."""
    import torch

    base = re.search(r"^FROM rayproject/ray:\S+-cu(\d+)(\d)$", _dockerfile("gpu"), re.M)
    base_cuda = (int(base.group(1)), int(base.group(2)))
    wheel_cuda = tuple(int(x) for x in torch.version.cuda.split(".")[:2]) if torch.version.cuda else (0, 0)
    gcp = _load("gcp.yaml")["available_node_types"]
    gpu_groups = [t for t in gcp.values() if t["resources"].get("GPU")]
    assert gpu_groups
    for t in gpu_groups:
        family = t["node_config"]["disks"][0]["initializeParams"]["sourceImage"]
        branch = int(re.search(r"nvidia-(\d+)$", family).group(1))
        assert max(base_cuda, wheel_cuda) <= _cuda_of_driver(branch), (family, base_cuda, wheel_cuda)
    aws = _load("aws.yaml")["available_node_types"]
    for name, t in aws.items():  # never Ray's default Deep Learning AMI (V71, CUDA 11.2)
        assert "base-oss-nvidia-driver-gpu" in t["node_config"]["ImageId"], name
    assert _cuda_of_driver(570) < (13, 0) <= _cuda_of_driver(580)  # the table bites: 570 is too old for cu130


@pytest.mark.parametrize("name", LAUNCHERS)
def test_launcher_images_and_setup_match_the_project(name):
    cfg = _load(name)
    assert cfg["docker"]["image"] == IMAGES["gpu"] and cfg["docker"]["head_image"] == IMAGES["cpu"]
    for group, t in cfg["available_node_types"].items():
        image = t.get("docker", {}).get("worker_image", cfg["docker"]["image"])
        if group != "head":
            assert image == IMAGES["gpu" if t["resources"].get("GPU") else "cpu"], (group, image)
    assert cfg["file_mounts"]["~/relate"] == "."
    # The API token travels as a file and is exported before `ray start`, so Serve replicas see it.
    assert all("RELATE_API_TOKEN=$(cat ~/relate_api_token)" in " ".join(cmds)
               for cmds in (cfg["head_start_ray_commands"], cfg["worker_start_ray_commands"]))
    assert "~/relate_api_token" in cfg["file_mounts"]
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras
    commands = cfg["setup_commands"] + cfg["head_setup_commands"] + cfg["worker_setup_commands"] + [
        c for t in cfg["available_node_types"].values() for c in t.get("worker_setup_commands", [])]
    assert not [c for c in commands if "pip" in c or "uv " in c], f"{name}: installs at node start: {commands}"


def _shipped_requests() -> dict[str, tuple[object, str]]:
    """Each GPU job's per-unit request, loaded from the config files we ship, with the node group meant for it."""
    from eval_jobs.ovsgg import OVSGGConfig
    from eval_jobs.triplet_probe import TripletProbeConfig
    from pipelines.annotate import AnnotateConfig
    from relate.config import load_config
    from train_jobs.train_relation import TrainRelationConfig

    train = load_config(TrainRelationConfig, REPO / "train_jobs/configs/released.yaml")
    annotate = load_config(AnnotateConfig, REPO / "pipelines/configs/annotate_gpu.yaml")
    ovsgg = load_config(OVSGGConfig, REPO / "eval_jobs/configs/ovsgg.yaml")
    probe = load_config(TripletProbeConfig, REPO / "eval_jobs/configs/triplet_probe.yaml")
    return {"train worker": (train.run.worker, "a100"), "annotation engine": (annotate.generate.resources, "annotate"),
            "ovsgg inference": (ovsgg.inference.resources, "a100"), "probe task": (probe.task.resources, "a100")}


def _kuberay_groups(name: str = "kuberay/raycluster.yaml") -> dict[str, dict[str, float]]:
    """What each group of a KubeRay manifest's cluster advertises (pod limits + rayStartParams resources)."""
    spec = _cluster_spec(_load(name))
    out = {}
    for g in [dict(spec["headGroupSpec"], groupName="head")] + spec["workerGroupSpecs"]:
        limits = g["template"]["spec"]["containers"][0]["resources"]["limits"]
        params = g["rayStartParams"]
        node = {"CPU": float(params.get("num-cpus", limits["cpu"])), "GPU": float(limits.get("nvidia.com/gpu", 0))}
        node.update(json.loads(json.loads(params["resources"])) if "resources" in params else {})
        out[g["groupName"]] = node
    return out


def test_shipped_job_configs_place_on_their_node_group_only():
    """The GPU jobs ask for resources by name from their config files; each fits (with the packing
    the config intends) on the node group meant for it, and nowhere else: not on the CPU head,
    not on the CPU group, not on the other GPU group."""
    requests = _shipped_requests()
    assert requests["train worker"][0].resources == {"trainer": 1} and requests["train worker"][0].num_gpus == 1
    assert requests["annotation engine"][0].resources.get("annotator", 0) > 0
    assert 0 < requests["annotation engine"][0].num_gpus < 1  # a fraction: engines share a GPU
    clusters = _launcher_groups()
    clusters["kuberay/raycluster.yaml"] = _kuberay_groups()
    _assert_home_only(clusters, requests)


def _launcher_groups() -> dict[str, dict[str, dict[str, float]]]:
    return {name: {k: t["resources"] for k, t in _load(name)["available_node_types"].items()} for name in LAUNCHERS}


def _assert_home_only(clusters: dict[str, dict[str, dict[str, float]]], requests: dict[str, tuple[object, str]]) -> None:
    """Each request fits its home group (filling its GPUs exactly) and no other group, head included."""
    from relate.placement import slots_per_node

    for cluster, types in clusters.items():
        for what, (res, home) in requests.items():
            slots = {t: slots_per_node(res, node) for t, node in types.items()}
            assert slots[home] >= 1, f"{cluster}: {what} ({res}) cannot be placed on {home} ({types[home]})"
            others = {t: n for t, n in slots.items() if t != home and n}
            assert not others, f"{cluster}: {what} would also land on {others}"
            if res.num_gpus:  # GPU requests fill their node's GPUs exactly
                assert slots[home] == int(types[home]["GPU"] / res.num_gpus), f"{cluster}: {what} leaves GPUs idle"


def _shipped_serve_requests() -> dict[str, tuple[object, str]]:
    """Each GPU Serve replica's request in serve_apps/configs/gpu.yaml (every deployment of the relate app
    that asks for a GPU, and the judge LLM's first placement bundle), with the node group meant for it."""
    from serve_apps.config import ServeAppConfig
    from serve_apps.deployments.judge import JudgeLLMConfig

    apps = {a["name"]: a["args"] for a in yaml.safe_load((REPO / "serve_apps/configs/gpu.yaml").read_text())["applications"]}
    relate = ServeAppConfig.model_validate(apps["relate"])
    sections = {"relation": relate.relation.deployment, "detector": relate.detector.deployment,
                "judge": relate.judge.deployment, "ingress": relate.ingress}
    out = {f"{name} replica": (d.replica_resources(), "h100") for name, d in sections.items() if d.num_gpus}
    out["judge LLM engine"] = (JudgeLLMConfig.model_validate(apps["judge-llm"]).worker_request(), "h100")
    return out


def test_shipped_serve_gpu_deployments_place_on_the_serving_group_only():
    """The GPU Serve replicas (relation model, detector, judge LLM) ask for the `server` resource the
    serving node group advertises: each fits that group, filling its GPUs, and no other (not the head,
    not the training or annotation GPUs) in both launchers and in the RayService's cluster."""
    requests = _shipped_serve_requests()
    assert {"relation replica", "detector replica", "judge LLM engine"} <= set(requests)
    for what, (res, _) in requests.items():
        assert res.resources.get("server", 0) == res.num_gpus > 0, f"{what}: one `server` unit per GPU ({res})"
    clusters = _launcher_groups()
    clusters["kuberay/rayservice.yaml"] = _kuberay_groups("kuberay/rayservice.yaml")
    _assert_home_only(clusters, requests)


def test_serve_resources_reach_ray_actor_options():
    """A deployment's custom resources travel into Serve's ray_actor_options; bad ones fail at config time."""
    from serve_apps.config import DeploymentOptions

    opts = DeploymentOptions(num_gpus=0.25, resources={"server": 0.25}).serve_options()
    assert opts["ray_actor_options"] == {"num_cpus": 0.5, "num_gpus": 0.25, "resources": {"server": 0.25}}
    assert "resources" not in DeploymentOptions().serve_options()["ray_actor_options"]
    from serve_apps.deployments.judge import JudgeLLMConfig

    for bad in ({"server": -1}, {"server": 1.5}, {"GPU": 1}):
        with pytest.raises(ValueError):
            DeploymentOptions(resources=bad)
        with pytest.raises(ValueError):
            JudgeLLMConfig(resources_per_worker=bad)


@pytest.mark.parametrize("name", LAUNCHERS)
def test_launcher_offers_what_the_serve_config_pins(name):
    serve = yaml.safe_load((REPO / "serve_apps" / "configs" / "gpu.yaml").read_text())
    wanted = {a["args"].get("accelerator_type") for a in serve["applications"]} - {None}
    offered = {k.split(":", 1)[1] for t in _load(name)["available_node_types"].values()
               for k in t["resources"] if k.startswith("accelerator_type:")}
    assert wanted <= offered, f"{name}: serve config pins {wanted}, node types offer {offered}"


# ----------------------------------------------------------------------------- runtime_env

def _requirement_names(reqs: list[str]) -> set[str]:
    return {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower().replace("_", "-") for r in reqs}


def _environment_plugins(spec: dict) -> set[str]:
    """The runtime_env plugins that would build an environment on a node for ``spec``: Ray's agent
    runs a plugin's ``create`` exactly when its name is a key of the runtime_env with a value that
    is not None (``ray._private.runtime_env.plugin.create_for_plugin_if_needed``)."""
    from ray._private.runtime_env.conda import CondaPlugin
    from ray._private.runtime_env.image_uri import ContainerPlugin, ImageURIPlugin
    from ray._private.runtime_env.pip import PipPlugin
    from ray._private.runtime_env.uv import UvPlugin
    from ray.runtime_env import RuntimeEnv

    env = RuntimeEnv(**spec)
    names = {cls.name for cls in (PipPlugin, UvPlugin, CondaPlugin, ImageURIPlugin, ContainerPlugin)}
    return {n for n in names if n in env and env[n] is not None}


def test_runtime_env_carries_only_the_working_dir_and_env_vars():
    """No pip/uv/conda section: Ray would copy the whole environment into a new venv per distinct
    runtime_env on each node (44 s for 6.4 GB here) although every requirement is installed. The
    node images (cluster/Dockerfile.*) carry the dependencies instead."""
    spec = _load("runtime_env.yaml")
    assert set(spec) <= {"working_dir", "excludes", "env_vars"}, sorted(spec)
    assert spec["working_dir"] == "."
    assert {".git", ".venv", "runs"} <= set(spec["excludes"])
    assert _environment_plugins(spec) == set()
    assert _environment_plugins({**spec, "pip": ["numpy"]}) == {"pip"}  # the check sees one when there is one
    assert _environment_plugins({**spec, "uv": ["numpy"]}) == {"uv"}
    env = spec["env_vars"]
    assert all(isinstance(v, str) for v in env.values())
    assert env["RELATE_ROOT"] == "/mnt/shared" and env["RAY_TRAIN_ENABLE_STATE_TRACKING"] == "1"
    assert "RAY_DATA_DISABLE_PROGRESS_BARS" not in env  # Ray Data logs progress into the job log


def test_rayjob_runtime_env_builds_no_environment():
    spec = yaml.safe_load(yaml.safe_load((CLUSTER / "kuberay" / "rayjob-train.yaml").read_text())["spec"]["runtimeEnvYAML"])
    assert spec["working_dir"] == "/home/ray/relate"  # a path in the image (absent here: checked as ".")
    assert _environment_plugins({**spec, "working_dir": "."}) == set() and spec["env_vars"]["RELATE_ROOT"] == "/mnt/shared"


# ----------------------------------------------------------------------------- KubeRay manifests
# Compact schema: a dict maps field -> schema; a one-item list is "list of"; a type is a leaf;
# a set is an enum of strings; MAP is a string-to-string map; OBJ is a Kubernetes core object
# we do not descend into. Field names and types are KubeRay's (CRD v1).

MAP, OBJ = "map", "obj"
CONTAINER = {"name": str, "image": str, "imagePullPolicy": str, "command": [str], "args": [str],
             "env": [OBJ], "ports": [OBJ], "resources": OBJ, "volumeMounts": [OBJ], "lifecycle": OBJ,
             "readinessProbe": OBJ, "livenessProbe": OBJ, "securityContext": OBJ}
POD_TEMPLATE = {"metadata": {"labels": MAP, "annotations": MAP},
                "spec": {"containers": [CONTAINER], "volumes": [OBJ], "tolerations": [OBJ], "affinity": OBJ,
                         "nodeSelector": MAP, "serviceAccountName": str, "imagePullSecrets": [OBJ]}}
AUTOSCALER_OPTIONS = {"upscalingMode": {"Default", "Aggressive", "Conservative"}, "idleTimeoutSeconds": int,
                      "resources": OBJ, "image": str, "imagePullPolicy": str, "env": [OBJ], "version": {"v1", "v2"}}
HEAD_GROUP = {"rayStartParams": MAP, "serviceType": str, "enableIngress": bool, "resources": MAP, "labels": MAP,
              "template": POD_TEMPLATE}
WORKER_GROUP = {"groupName": str, "replicas": int, "minReplicas": int, "maxReplicas": int, "rayStartParams": MAP,
                "idleTimeoutSeconds": int, "numOfHosts": int, "suspend": bool, "resources": MAP, "labels": MAP,
                "template": POD_TEMPLATE}
AUTH_OPTIONS = {"mode": {"disabled", "token"}, "secretName": str, "enableK8sTokenAuth": bool}
RAY_CLUSTER_SPEC = {"rayVersion": str, "enableInTreeAutoscaling": bool, "autoscalerOptions": AUTOSCALER_OPTIONS,
                    "headGroupSpec": HEAD_GROUP, "workerGroupSpecs": [WORKER_GROUP], "suspend": bool,
                    "headServiceAnnotations": MAP, "authOptions": AUTH_OPTIONS}
RAY_JOB_SPEC = {"entrypoint": str, "runtimeEnvYAML": str, "metadata": MAP,
                "submissionMode": {"K8sJobMode", "HTTPMode", "InteractiveMode", "SidecarMode"},
                "backoffLimit": int, "shutdownAfterJobFinishes": bool, "ttlSecondsAfterFinished": int,
                "activeDeadlineSeconds": int, "rayClusterSpec": RAY_CLUSTER_SPEC, "clusterSelector": MAP,
                "entrypointNumCpus": float, "entrypointNumGpus": float, "entrypointResources": str,
                "suspend": bool, "jobId": str}
# serviceUnhealthySecondThreshold / deploymentUnhealthySecondThreshold are left out on purpose:
# KubeRay deprecated and ignores them (ray-project/kuberay#1685), so using them is an error here.
RAY_SERVICE_SPEC = {"serveConfigV2": str, "rayClusterConfig": RAY_CLUSTER_SPEC,
                    "upgradeStrategy": {"type": {"NewCluster", "None", "NewClusterWithIncrementalUpgrade"}},
                    "excludeHeadPodFromServeSvc": bool}
SPECS = {"RayCluster": RAY_CLUSTER_SPEC, "RayJob": RAY_JOB_SPEC, "RayService": RAY_SERVICE_SPEC}
REQUIRED = {"headGroupSpec": ["template"], "workerGroupSpecs[]": ["groupName", "minReplicas", "maxReplicas",
                                                                  "template"],
            "RayService": ["rayClusterConfig"], "RayCluster": ["headGroupSpec"], "containers[]": ["name"]}


def _check(node, schema, path: str, errors: list[str]) -> None:
    if schema is OBJ:
        if not isinstance(node, dict):
            errors.append(f"{path}: expected an object")
    elif schema is MAP:
        if not isinstance(node, dict) or not all(isinstance(v, str) for v in node.values()):
            errors.append(f"{path}: expected a map of strings, got {node!r}")
    elif isinstance(schema, set):
        if node not in schema:
            errors.append(f"{path}: {node!r} not one of {sorted(schema)}")
    elif isinstance(schema, list):
        if not isinstance(node, list):
            errors.append(f"{path}: expected a list")
            return
        for i, item in enumerate(node):
            _check(item, schema[0], f"{path}[{i}]", errors)
    elif isinstance(schema, dict):
        if not isinstance(node, dict):
            errors.append(f"{path}: expected an object")
            return
        for key, value in node.items():
            if key not in schema:
                errors.append(f"{path}.{key}: not a field here (valid: {sorted(schema)})")
            else:
                _check(value, schema[key], f"{path}.{key}", errors)
        leaf = re.sub(r"\[\d+\]", "[]", path.rsplit(".", 1)[-1])
        for key in REQUIRED.get(leaf, []):
            if key not in node:
                errors.append(f"{path}: missing required field {key}")
    elif schema is float:
        if not isinstance(node, (int, float)) or isinstance(node, bool):
            errors.append(f"{path}: expected a number, got {node!r}")
    elif not isinstance(node, schema) or (schema is int and isinstance(node, bool)):
        errors.append(f"{path}: expected {schema.__name__}, got {node!r}")


def kuberay_errors(manifest: dict) -> list[str]:
    """Problems with a KubeRay manifest, each naming the field path; [] when it is valid."""
    errors: list[str] = []
    kind = manifest.get("kind")
    if manifest.get("apiVersion") != "ray.io/v1":
        errors.append(f"apiVersion: {manifest.get('apiVersion')!r}, expected 'ray.io/v1'")
    if kind not in SPECS:
        return errors + [f"kind: {kind!r} not one of {sorted(SPECS)}"]
    if not isinstance(manifest.get("metadata", {}).get("name"), str):
        errors.append("metadata.name: missing")
    _check(manifest.get("spec"), SPECS[kind], kind, errors)
    return errors


def _cluster_spec(manifest: dict) -> dict:
    spec = manifest["spec"]
    return {"RayCluster": lambda: spec, "RayJob": lambda: spec["rayClusterSpec"],
            "RayService": lambda: spec["rayClusterConfig"]}[manifest["kind"]]()


@pytest.mark.parametrize("name,kind", sorted(KUBERAY.items()))
def test_kuberay_manifest_fields(name, kind):
    manifest = _load(f"kuberay/{name}")
    assert manifest["kind"] == kind
    assert kuberay_errors(manifest) == []


def test_kuberay_schema_catches_mistakes():
    m = _load("kuberay/raycluster.yaml")
    m["spec"]["workerGroupSpec"] = m["spec"].pop("workerGroupSpecs")  # singular: a classic typo
    m["spec"]["autoscalerOptions"]["upscalingMode"] = "Fast"
    m["spec"]["headGroupSpec"]["rayStartParams"]["num-cpus"] = 0  # must be a string
    errors = kuberay_errors(m)
    assert any("workerGroupSpec:" in e for e in errors)
    assert any("upscalingMode" in e for e in errors)
    assert any("rayStartParams" in e for e in errors)
    j = _load("kuberay/rayjob-train.yaml")
    del j["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["maxReplicas"]
    assert any("missing required field maxReplicas" in e for e in kuberay_errors(j))


@pytest.mark.parametrize("name", sorted(KUBERAY))
def test_kuberay_cluster_properties(name):
    manifest = _load(f"kuberay/{name}")
    spec = _cluster_spec(manifest)
    assert spec["rayVersion"] == RAY_VERSION and spec["enableInTreeAutoscaling"] is True
    assert spec["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
    groups = [dict(spec["headGroupSpec"], groupName="head")] + spec["workerGroupSpecs"]
    for group in groups:  # the GPU image only where there are GPUs
        ray, *sidecars = group["template"]["spec"]["containers"]
        gpus = ray["resources"]["limits"].get("nvidia.com/gpu")
        assert ray["image"] == IMAGES["gpu" if gpus else "cpu"], (name, group["groupName"])
        for container in sidecars:  # the nginx front runs from the image already on the node, with no GPU
            assert container["image"] == ray["image"], (name, group["groupName"], container["name"])
            assert "nvidia.com/gpu" not in container["resources"]["limits"], (name, container["name"])
    for group in spec["workerGroupSpecs"]:
        assert group["minReplicas"] <= group.get("replicas", 0) <= group["maxReplicas"] or manifest["kind"] != "RayCluster"
        raw = group["rayStartParams"].get("resources")
        if raw is not None:  # KubeRay passes it to `ray start --resources` verbatim: quoted JSON
            resources = json.loads(json.loads(raw))
            assert all(isinstance(v, int) and v > 0 for v in resources.values())
        pvcs = [v["persistentVolumeClaim"]["claimName"] for v in group["template"]["spec"].get("volumes", [])
                if "persistentVolumeClaim" in v]
        assert set(pvcs) <= {_load("kuberay/shared-pvc.yaml")["metadata"]["name"]}


def test_raycluster_autoscales_every_group_from_zero():
    spec = _load("kuberay/raycluster.yaml")["spec"]
    names = {g["groupName"]: g for g in spec["workerGroupSpecs"]}
    assert {"cpu", "a100", "annotate"} <= set(names)
    assert all(g["minReplicas"] == 0 and g["maxReplicas"] > 0 for g in names.values())
    assert spec["autoscalerOptions"]["idleTimeoutSeconds"] > 0
    custom = {k for g in names.values() if "resources" in g["rayStartParams"]
              for k in json.loads(json.loads(g["rayStartParams"]["resources"]))}
    assert {"annotator", "trainer", "evaluator"} <= custom


def _module_path(module: str) -> Path:
    base = REPO.joinpath(*module.split("."))
    return base.with_suffix(".py") if base.with_suffix(".py").exists() else base / "__init__.py"


def test_rayjob_entrypoint_references_exist():
    spec = _load("kuberay/rayjob-train.yaml")["spec"]
    argv = shlex.split(spec["entrypoint"])
    assert argv[:2] == ["python", "-m"]
    assert _module_path(argv[2]).exists(), f"entrypoint module {argv[2]} missing"
    config = argv[argv.index("--config") + 1]
    assert (REPO / config).is_file()
    overrides = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
    from relate.config import load_config
    from train_jobs.train_relation import TrainRelationConfig

    cfg = load_config(TrainRelationConfig, REPO / config, overrides)  # overrides name real fields
    assert cfg.run.num_workers == 4 and cfg.run.worker.num_gpus == 1  # Table 14: 4 x A100
    assert cfg.run.worker.resources == {"trainer": 1}
    runtime_env = yaml.safe_load(spec["runtimeEnvYAML"])
    assert runtime_env["working_dir"] == "/home/ray/relate"
    assert "WORKDIR /home/ray/relate" in _dockerfile("gpu") and "WORKDIR /home/ray/relate" in _dockerfile("cpu")
    assert spec["metadata"]["job"] == "train_relation"


def test_rayservice_embeds_the_serve_config_verbatim():
    spec = _load("kuberay/rayservice.yaml")["spec"]
    embedded = yaml.safe_load(spec["serveConfigV2"])
    assert embedded == yaml.safe_load((REPO / "serve_apps" / "configs" / "gpu.yaml").read_text()), \
        "cluster/kuberay/rayservice.yaml is out of date with serve_apps/configs/gpu.yaml: re-embed it"
    for app in embedded["applications"]:
        module = app["import_path"].split(":")[0]
        assert _module_path(module).exists(), f"{app['name']}: import_path module {module} missing"
    accel = {a["args"].get("accelerator_type") for a in embedded["applications"]} - {None}
    offered = {k.split(":", 1)[1] for g in spec["rayClusterConfig"]["workerGroupSpecs"]
               for k in json.loads(json.loads(g["rayStartParams"].get("resources", '"{}"')))
               if k.startswith("accelerator_type:")}
    assert accel <= offered, f"serve config asks for {accel}, cluster offers {offered}"


# ----------------------------------------------------------------------------- README

def _readme_text(path: Path | None = None) -> str:
    """cluster/README.md (or ``path``) with continuation lines joined and each `python -m
    scripts.submit_job [opts] -- <job> ...` rewritten as the `python -m <job> ...` it submits (so
    both forms are checked alike)."""
    text = (path or CLUSTER / "README.md").read_text().replace("\\\n", " ")
    helper = re.compile(r"python -m scripts\.submit_job((?: +--[\w-]+(?: +(?!--)[^\s]+)?)*) +-- +")
    assert "--submit" in "".join(m.group(1) for m in helper.finditer(text)), "README no longer uses the helper?"
    return helper.sub("python -m ", text)


def test_readme_names_only_things_that_exist():
    text = _readme_text()
    paths = set(re.findall(r"(?<![\w/.-])((?:cluster|pipelines|train_jobs|serve_apps|eval_jobs|scripts|"
                           r"benchmarks|relate)/[\w./-]+\.(?:yaml|py|sh|md|json))", text))
    paths |= set(re.findall(r"cluster/Dockerfile\.\w+", text))
    assert paths, "README names no files?"
    missing = sorted(p for p in paths if not (REPO / p).exists())
    assert not missing, f"README names missing files: {missing}"
    modules = set(re.findall(r"python -m ([\w.]+)", text))
    assert {"pipelines.synthetic", "pipelines.annotate", "train_jobs.train_relation"} <= modules
    missing = sorted(m for m in modules if not _module_path(m).exists())
    assert not missing, f"README runs missing modules: {missing}"


JOB_CONFIGS = {"pipelines.synthetic": "pipelines.synthetic:SyntheticJobConfig",
               "pipelines.annotate": "pipelines.annotate:AnnotateConfig",
               "train_jobs.train_relation": "train_jobs.train_relation:TrainRelationConfig",
               "eval_jobs.ovsgg": "eval_jobs.ovsgg:OVSGGConfig",
               "eval_jobs.triplet_probe": "eval_jobs.triplet_probe:TripletProbeConfig"}


def test_readme_job_commands_validate_against_their_configs():
    """Each `python -m <job> --config ... --set ...` in the README loads as that job's config."""
    import importlib

    from relate.config import load_config

    text = _readme_text()
    commands = re.findall(r"python -m ([\w.]+)((?: +--(?:config|set) +[^\s]+)*)", text)
    assert {m for m, _ in commands} >= set(JOB_CONFIGS)
    for module, args in commands:
        argv = shlex.split(args)
        config = argv[argv.index("--config") + 1] if "--config" in argv else None
        overrides = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
        mod, cls = JOB_CONFIGS[module].split(":")
        load_config(getattr(importlib.import_module(mod), cls), REPO / config if config else None, overrides)


def test_top_readme_cluster_section_commands_validate():
    """The top-level README's cluster section is checked like cluster/README.md: its job commands
    (plain and through submit_job) load as their configs and the files it names exist."""
    import importlib

    from relate.config import load_config

    text = _readme_text(REPO / "README.md")
    section = text[text.index("## On a cluster and on GPUs"):]
    section = section[: section.index("\n## ", 3)]
    commands = re.findall(r"python -m ([\w.]+)((?: +--(?:config|set) +[^\s]+)*)", section)
    assert {"pipelines.annotate", "train_jobs.train_relation"} <= {m for m, _ in commands}
    for module, args in commands:
        if module not in JOB_CONFIGS:
            continue
        argv = shlex.split(args)
        mod, cls = JOB_CONFIGS[module].split(":")
        load_config(getattr(importlib.import_module(mod), cls), REPO / argv[argv.index("--config") + 1],
                    [argv[i + 1] for i, a in enumerate(argv) if a == "--set"])
    for path in re.findall(r"`((?:cluster|pipelines|train_jobs|serve_apps|scripts)/[\w./-]+)`", section):
        assert (REPO / path).exists(), f"README's cluster section names a missing file: {path}"


# ----------------------------------------------------------------------------- instance types and pods
# Each instance as its cloud lists it: (GPUs, vCPUs, memory, unit). AWS gives GiB, GCP GB.
INSTANCES = {"m5.2xlarge": (0, 8, 32, "GiB"), "n2-standard-8": (0, 8, 32, "GB"),
             "c6i.8xlarge": (0, 32, 64, "GiB"), "n2-standard-32": (0, 32, 128, "GB"),
             "p4d.24xlarge": (8, 96, 1152, "GiB"), "a2-highgpu-8g": (8, 96, 680, "GB"),
             "g6e.2xlarge": (1, 8, 64, "GiB"), "g2-standard-24": (2, 24, 96, "GB"),
             "p5.48xlarge": (8, 192, 2048, "GiB"), "a3-highgpu-8g": (8, 208, 1872, "GB")}
GIB_PER_GB = 1e9 / 2**30


def _pods_per_node(instance: str, cpu: float, mem_gib: float, gpu: int) -> int:
    """Pods of that size a node holds, keeping 1 vCPU and 10% of memory + 1 GiB for the system."""
    gpus, vcpus, mem, unit = INSTANCES[instance]
    node_gib = mem * (GIB_PER_GB if unit == "GB" else 1.0)
    n = min(int((vcpus - 1) // cpu), int((0.9 * node_gib - 1) // mem_gib))
    return min(n, gpus // gpu) if gpu else n


def _instance_table() -> list[dict]:
    text = (CLUSTER / "README.md").read_text()
    lines = text[text.index("| group | instance | GPUs |"):].splitlines()
    rows = []
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    out = []
    for row in rows:
        group, inst, gpus, vcpus, mem, pod, pods = [c.strip() for c in row.strip("|").split("|")]
        cpu, pmem, pgpu = [p.strip() for p in pod.split(",")]
        out.append({"group": group, "instance": inst, "gpus": int(gpus), "vcpus": int(vcpus), "memory": mem,
                    "pod": (float(cpu), float(pmem.removesuffix("Gi")), int(pgpu)), "pods": int(pods)})
    return out


def _manifest_pods() -> dict[str, set]:
    """group -> the (CPU, GiB, GPU) of its pods in every KubeRay manifest that defines it."""
    out: dict[str, set] = {}
    for name in KUBERAY:
        spec = _cluster_spec(_load(f"kuberay/{name}"))
        groups = [dict(spec["headGroupSpec"], groupName="head")] + spec["workerGroupSpecs"]
        if name != "raycluster.yaml":  # a RayJob's / RayService's own head is smaller and lives elsewhere
            groups = groups[1:]
        for g in groups:
            lim = g["template"]["spec"]["containers"][0]["resources"]["limits"]
            out.setdefault(g["groupName"], set()).add(
                (float(lim["cpu"]), float(lim["memory"].removesuffix("Gi")), int(lim.get("nvidia.com/gpu", 0))))
    return out


def test_instance_table_matches_the_clouds_the_configs_and_the_pods():
    table = _instance_table()
    pods = _manifest_pods()
    aws, gcp = (_load(n)["available_node_types"] for n in LAUNCHERS)
    assert {r["group"] for r in table} == set(aws) == set(gcp) == set(pods)
    for r in table:
        gpus, vcpus, mem, unit = INSTANCES[r["instance"]]
        assert (r["gpus"], r["vcpus"], r["memory"]) == (gpus, vcpus, f"{mem} {unit}"), r
        launcher = aws if unit == "GiB" else gcp
        node = launcher[r["group"]]
        kind = node["node_config"].get("InstanceType") or node["node_config"].get("machineType")
        assert kind == r["instance"], (r["group"], kind)
        if r["group"] != "head":  # the launcher gives a worker group the whole machine
            assert node["resources"]["CPU"] == vcpus and node["resources"].get("GPU", 0) == gpus, r
        assert pods[r["group"]] == {r["pod"]}, (r["group"], pods[r["group"]])
        n = _pods_per_node(r["instance"], *r["pod"])
        assert n == r["pods"] >= 1, (r["instance"], n)
        if gpus:  # every GPU of the machine gets a pod
            assert n * r["pod"][2] == gpus, r


def test_pod_rule_rejects_pods_that_leave_gpus_idle_or_do_not_fit():
    assert _pods_per_node("g6e.2xlarge", 8, 48, 1) == 0       # the old annotate pod: 8 vCPUs of 8
    assert _pods_per_node("g2-standard-24", 8, 48, 1) == 1    # ... and one of two L4s idle
    assert _pods_per_node("a2-highgpu-8g", 12, 120, 1) == 4   # the old A100 pod: memory for 4 of 8
    assert _pods_per_node("p4d.24xlarge", 12, 120, 1) == 7    # CPUs for 7 of 8


def test_shipped_gpu_requests_fit_the_pods_of_their_group():
    from relate.placement import slots_per_node

    groups = _kuberay_groups()
    for what, (res, group) in _shipped_requests().items():
        assert slots_per_node(res, groups[group]) >= 1, (what, group)
