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
