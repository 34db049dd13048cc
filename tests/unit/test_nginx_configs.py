"""The nginx files in front of Serve's proxy agree with the Serve configs they front: the body
limit is the app's max_request_bytes (and the JSON 413 says so), the upstream is the proxy's
port, nginx waits longer than Serve's request_timeout_s (the app's own answer comes first), and
the header limits, header timeout and connection caps are all set, and the cap on model requests
in flight is what the app's ingress replicas admit in all (replicas x max_inflight_requests), so
the excess is refused at the edge and the app's own admission is never the first to refuse, and the
app admits no more than its model replicas hold (replicas x max_ongoing_requests)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PAIRS = [("serve_apps/nginx/relate.conf", "serve_apps/configs/local.yaml"),
         ("cluster/nginx/relate.conf", "serve_apps/configs/gpu.yaml")]


def _one(text: str, pattern: str) -> str:
    found = re.findall(pattern, text)
    assert len(found) == 1, (pattern, found)
    return found[0]


def _app_capacity(args: dict) -> int:
    """Model requests the app's ingress replicas admit at once: replicas (the autoscaler's most)
    times security.max_inflight_requests (SecuritySettings' default where the YAML leaves it out)."""
    from serve_apps.config import SecuritySettings

    return _replicas(args["ingress"]) * SecuritySettings.model_validate(args["security"]).max_inflight_requests


def _replicas(deployment: dict) -> int:
    return deployment["autoscaling"]["max_replicas"] if "autoscaling" in deployment else deployment.get("num_replicas", 1)


@pytest.mark.parametrize("conf,serve_yaml", PAIRS)
def test_nginx_front_matches_the_serve_config(conf, serve_yaml):
    text = (REPO / conf).read_text()
    cfg = yaml.safe_load((REPO / serve_yaml).read_text())
    relate = next(a for a in cfg["applications"] if a["import_path"] == "serve_apps.app:app_builder")
    body = relate["args"]["security"]["max_request_bytes"]
    assert int(_one(text, r"client_max_body_size (\d+)m;")) << 20 == body
    assert f"request body exceeds {body} bytes" in text
    assert int(_one(text, r"server 127\.0\.0\.1:(\d+);")) == cfg["http_options"]["port"]
    assert float(_one(text, r"proxy_read_timeout (\d+)s;")) > cfg["http_options"]["request_timeout_s"]
    assert int(_one(text, r"client_header_timeout (\d+)s;")) <= 15
    count, kb = _one(text, r"large_client_header_buffers (\d+) (\d+)k;")
    assert int(count) * int(kb) <= 64  # at most 64 KB of headers per request
    per_client = int(_one(text, r"limit_conn relate_per_client (\d+);"))
    model = int(_one(text, r"limit_conn relate_model (\d+);"))
    admits = _app_capacity(relate["args"])
    assert model == admits, (conf, model, admits)
    relation = relate["args"]["relation"]["deployment"]
    holds = _replicas(relation) * relation["max_ongoing_requests"]
    assert admits <= holds, (serve_yaml, "the ingress admits more model requests than the model replicas hold", admits, holds)
    assert per_client <= model <= int(_one(text, r"limit_conn relate_total (\d+);"))
    assert "~^POST:/v1/ relate;" in text  # counted as serve_apps/admission.py counts: POST /v1/...
    assert "limit_conn_status 503;" in text and "add_header Retry-After" in text
    assert "error_page 414 494 =431 @header_too_large;" in text
    assert "proxy_request_buffering off;" in text  # the app counts and times the body itself


def test_launchers_start_the_cluster_front_before_ray():
    for name in ("aws", "gcp"):
        cfg = yaml.safe_load((REPO / "cluster" / f"{name}.yaml").read_text())
        for key in ("head_start_ray_commands", "worker_start_ray_commands"):
            cmds = " ".join(cfg[key])
            assert "cluster/nginx/relate.conf" in cmds and cmds.index("nginx") < cmds.index("ray start"), (name, key)
    for kind in ("cpu", "gpu"):
        assert "nginx-light" in (REPO / "cluster" / f"Dockerfile.{kind}").read_text()


# ----------------------------------------------------------------------------- KubeRay front
# The KubeRay manifests run cluster/nginx/relate.conf itself as a sidecar in every pod whose Serve
# proxy a Service reaches (the RayService's head and workers: proxy_location EveryNode; the
# RayCluster's head, whose head Service carries a `serve` port), from a ConfigMap that must be the
# file byte for byte. KubeRay builds relate-serve-svc and the head Service from the Ray container's
# (index 0) port named `serve`, with no targetPort of its own, so that port must be nginx's listen
# port and no container may declare Serve's own port.

CONFIGMAP = "cluster/kuberay/nginx-configmap.yaml"
FRONTED = {"cluster/kuberay/rayservice.yaml": "every group", "cluster/kuberay/raycluster.yaml": "head"}
KUBERAY_METRICS_DEFAULT = 8080  # KubeRay's metrics-export-port when rayStartParams has none


def _load_yaml(path: str) -> dict:
    return yaml.safe_load((REPO / path).read_text())


def _fronted_groups(manifest: dict, which: str) -> list[tuple[str, dict]]:
    spec = manifest["spec"].get("rayClusterConfig", manifest["spec"])
    groups = [("head", spec["headGroupSpec"])]
    if which == "every group":
        groups += [(g["groupName"], g) for g in spec["workerGroupSpecs"]]
    return groups


def kuberay_front_errors(manifest: dict, which: str, configmap: dict, conf_text: str) -> list[str]:
    """What keeps ``manifest``'s pods from being fronted by ``conf_text`` through ``configmap``; [] when
    they are. ``which`` is "head" or "every group": the pods whose Serve proxy a Service reaches."""
    errors = []
    if configmap.get("kind") != "ConfigMap" or configmap.get("data", {}).get("relate.conf") != conf_text:
        errors.append(f"{CONFIGMAP}: data['relate.conf'] differs from cluster/nginx/relate.conf: regenerate it")
    conf = configmap.get("data", {}).get("relate.conf", "")
    listen = int(_one(conf, r"listen [\d.]+:(\d+) "))
    serve_port = int(_one(conf, r"server 127\.0\.0\.1:(\d+);"))
    if "serveConfigV2" in manifest["spec"]:
        http = yaml.safe_load(manifest["spec"]["serveConfigV2"])["http_options"]
        if http["port"] != serve_port:
            errors.append(f"serveConfigV2 port {http['port']} is not nginx's upstream {serve_port}")
        for port in (manifest["spec"].get("serveService") or {}).get("spec", {}).get("ports", []):
            if port.get("port") == serve_port or port.get("targetPort") == serve_port:
                errors.append(f"serveService exposes Serve's port {serve_port}")
    for name, group in _fronted_groups(manifest, which):
        pod = group["template"]["spec"]
        ray, *others = pod["containers"]
        if not ray["name"].startswith("ray-"):
            errors.append(f"{name}: the Ray container is not first (KubeRay reads index 0)")
        declared = [(c["name"], p["containerPort"]) for c in pod["containers"] for p in c.get("ports", [])]
        numbers = [n for _, n in declared]
        if serve_port in numbers:
            errors.append(f"{name}: a container declares Serve's own port {serve_port}")
        if len(set(numbers)) != len(numbers):
            errors.append(f"{name}: a port is declared twice: {declared}")
        named_serve = [p["containerPort"] for p in ray.get("ports", []) if p.get("name") == "serve"]
        if named_serve != [listen]:
            errors.append(f"{name}: the Ray container's `serve` port is {named_serve}, not nginx's {listen}")
        metrics = int(group["rayStartParams"].get("metrics-export-port", KUBERAY_METRICS_DEFAULT))
        if metrics == listen:
            errors.append(f"{name}: Ray's metrics export port {metrics} is nginx's listen port")
        nginx = [c for c in others if c["name"] == "nginx"]
        if len(nginx) != 1:
            errors.append(f"{name}: no nginx sidecar")
            continue
        command = " ".join(nginx[0].get("command", []) + nginx[0].get("args", []))
        conf_path = re.search(r"nginx -p \S+ -c (\S+)", command)
        if not conf_path or "daemon off;" not in command:
            errors.append(f"{name}: the sidecar does not run `nginx -p ... -c <file> -g 'daemon off; ...'`")
            continue
        folder, file = conf_path.group(1).rsplit("/", 1)
        mounts = {m["name"]: m["mountPath"] for m in nginx[0].get("volumeMounts", [])}
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        sources = [(volumes.get(v) or {}).get("configMap", {}) for v, path in mounts.items() if path == folder]
        if file != "relate.conf" or not any(s.get("name") == configmap["metadata"]["name"] for s in sources):
            errors.append(f"{name}: {conf_path.group(1)} is not the ConfigMap {configmap['metadata']['name']}'s relate.conf")
        if nginx[0].get("readinessProbe", {}).get("tcpSocket", {}).get("port") != listen:
            errors.append(f"{name}: the sidecar's readiness is not nginx's listen port {listen}")
    return errors


@pytest.mark.parametrize("path", sorted(FRONTED))
def test_kuberay_pods_are_fronted_by_the_cluster_nginx_file(path):
    errors = kuberay_front_errors(_load_yaml(path), FRONTED[path], _load_yaml(CONFIGMAP),
                                  (REPO / "cluster/nginx/relate.conf").read_text())
    assert errors == []


def test_kuberay_front_check_catches_a_missing_front_an_exposed_serve_port_and_drift():
    conf = (REPO / "cluster/nginx/relate.conf").read_text()
    configmap = _load_yaml(CONFIGMAP)

    def errors(edit_manifest=None, edit_conf=None) -> list[str]:
        m = _load_yaml("cluster/kuberay/rayservice.yaml")
        cm = _load_yaml(CONFIGMAP)
        if edit_manifest:
            edit_manifest(m["spec"]["rayClusterConfig"])
        if edit_conf:
            cm["data"]["relate.conf"] = edit_conf(cm["data"]["relate.conf"])
        return kuberay_front_errors(m, "every group", cm, conf)

    assert errors() == []
    worker = lambda s: s["workerGroupSpecs"][0]  # noqa: E731
    drop_sidecar = lambda s: worker(s)["template"]["spec"]["containers"].pop()  # noqa: E731
    assert any("h100: no nginx sidecar" in e for e in errors(drop_sidecar))

    def expose_serve(s):
        s["headGroupSpec"]["template"]["spec"]["containers"][0]["ports"][-1] = {"containerPort": 8000, "name": "serve"}
    found = errors(expose_serve)
    assert any("Serve's own port 8000" in e for e in found) and any("`serve` port is [8000]" in e for e in found)

    def metrics_default(s):
        del s["headGroupSpec"]["rayStartParams"]["metrics-export-port"]
    assert any("metrics export port 8080" in e for e in errors(metrics_default))

    def other_configmap(s):
        worker(s)["template"]["spec"]["volumes"][0]["configMap"]["name"] = "someone-elses"
    assert any("h100:" in e and "ConfigMap" in e for e in errors(other_configmap))
    raised = errors(edit_conf=lambda t: t.replace("limit_conn relate_model 512;", "limit_conn relate_model 1024;"))
    assert any("differs from cluster/nginx/relate.conf" in e for e in raised)
    assert configmap["data"]["relate.conf"] == conf


def test_kuberay_sidecar_command_passes_nginx_t(tmp_path):
    """`nginx -t` on the ConfigMap's file with the sidecar's own -g directives (needs an nginx binary:
    scripts/system_deps.sh installs nginx-light; skipped without one unless CI is set)."""
    import os
    import shlex
    import shutil
    import subprocess

    if shutil.which("nginx") is None:
        if os.environ.get("CI"):
            pytest.fail("nginx is not installed (scripts/system_deps.sh installs nginx-light)")
        pytest.skip("no nginx binary")
    conf = tmp_path / "relate.conf"
    conf.write_text(_load_yaml(CONFIGMAP)["data"]["relate.conf"])
    (tmp_path / "logs").mkdir()
    (tmp_path / "tmp").mkdir()
    head = _load_yaml("cluster/kuberay/rayservice.yaml")["spec"]["rayClusterConfig"]["headGroupSpec"]
    sidecar = next(c for c in head["template"]["spec"]["containers"] if c["name"] == "nginx")
    argv = shlex.split(sidecar["args"][0].split("exec ", 1)[1])
    directives = argv[argv.index("-g") + 1]
    run = subprocess.run(["nginx", "-t", "-p", str(tmp_path), "-c", str(conf), "-g", directives],
                         capture_output=True, text=True, timeout=30)
    assert run.returncode == 0, run.stderr
