"""Every shipped cluster config starts Ray with token authentication, the token kept out of the repo.

Ray's dashboard and its Jobs API run whatever code a caller submits; with ``RAY_AUTH_MODE`` unset
they accept anyone who reaches the port. So every YAML under cluster/ that exposes a dashboard on
all interfaces (``--dashboard-host=0.0.0.0`` in a launcher's head command; a KubeRay cluster spec,
whose head binds 0.0.0.0 unless ``rayStartParams.dashboard-host`` says otherwise) must turn token
auth on for every node that can join, in the same file:

- launcher configs (``ray up``): each ``ray start`` command, head and worker, exports
  ``RAY_AUTH_MODE=token`` and ``RAY_AUTH_TOKEN_PATH`` to a file that ``file_mounts`` copies from
  outside the repository;
- KubeRay manifests: ``authOptions.mode: token`` with a ``secretName`` (the operator then sets the
  mode and the token on every Ray container and sends the token itself), or ``RAY_AUTH_MODE=token``
  plus ``RAY_AUTH_TOKEN`` from a ``secretKeyRef`` on the head, every worker group and the autoscaler.

No file under cluster/ may hold a token: no ``RAY_AUTH_TOKEN`` given a literal value, no Secret
manifest with data, no long hex string. The mutation tests below remove or weaken each setting in
turn and check that the rule notices.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "cluster"
YAMLS = sorted(p for p in CLUSTER.rglob("*") if p.suffix in {".yaml", ".yml"})
KUBERAY_KINDS = {"RayCluster": ("spec",), "RayJob": ("spec", "rayClusterSpec"),
                 "RayService": ("spec", "rayClusterConfig")}

_ALL_INTERFACES = re.compile(r"--dashboard-host[= ]+['\"]?0\.0\.0\.0\b")
# The same in any shape: a flag, a YAML key (`dashboard-host: "0.0.0.0"`), an env var.
_ANY_ALL_INTERFACES = re.compile(r"dashboard[-_]host['\"]?\s*[=: ]\s*['\"]?0\.0\.0\.0\b", re.I)
_TOKEN_PATH = re.compile(r"\bRAY_AUTH_TOKEN_PATH=(\S+?);?(?:\s|$)")
# A token is 64 hex characters from `ray get-auth-token --generate`, 48 from `openssl rand -hex 24`.
_HEX_SECRET = re.compile(r"\b[0-9a-fA-F]{32,}\b")
# `kubectl create secret ... --from-literal=auth_token=<value>` with the value typed in.
_FROM_LITERAL = re.compile(r"--from-literal=auth_token=(?![$'\"\s]|$)\S*", re.M)
# RAY_AUTH_TOKEN=<something other than a $(...) or $VAR expansion or an empty value>
_TOKEN_ASSIGNMENT = re.compile(r"\bRAY_AUTH_TOKEN(?:=|:[ \t]*)['\"]?(?![$'\"\s]|$)", re.M)


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]


# ----------------------------------------------------------------------------- launcher configs

def _launcher_gaps(cfg: dict) -> tuple[bool, list[str]]:
    """(whether the head's dashboard listens on all interfaces, what lacks token auth)."""
    exposed = any(_ALL_INTERFACES.search(c) for c in cfg.get("head_start_ray_commands", []))
    gaps: list[str] = []
    mounts = cfg.get("file_mounts") or {}
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        starts = [c for c in cfg.get(key, []) if "ray start" in c]
        if not starts:
            gaps.append(f"{key}: no `ray start` command")
        for cmd in starts:
            before = cmd[: cmd.index("ray start")]  # what the shell has exported by the time Ray starts
            if not re.search(r"\bRAY_AUTH_MODE=token\b", before):
                gaps.append(f"{key}: `ray start` without RAY_AUTH_MODE=token exported before it")
            path = _TOKEN_PATH.search(before)
            if path is None:
                gaps.append(f"{key}: `ray start` without RAY_AUTH_TOKEN_PATH exported before it")
                continue
            target = path.group(1).replace("$HOME/", "~/")
            source = mounts.get(target)
            if source is None:
                gaps.append(f"{key}: token file {target} is not in file_mounts (no node would have it)")
            elif not str(source).startswith(("~", "/")) or str(source).startswith(str(REPO)):
                gaps.append(f"{key}: token file {target} is copied from {source!r}, inside the repository")
    return exposed, gaps


# ----------------------------------------------------------------------------- KubeRay manifests

def _env(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env") or [] if isinstance(e, dict) and "name" in e}


def _env_gaps(where: str, env: dict[str, dict]) -> list[str]:
    gaps = []
    if env.get("RAY_AUTH_MODE", {}).get("value") != "token":
        gaps.append(f"{where}: RAY_AUTH_MODE is not token")
    if "secretKeyRef" not in (env.get("RAY_AUTH_TOKEN", {}).get("valueFrom") or {}):
        gaps.append(f"{where}: RAY_AUTH_TOKEN does not come from a Secret (valueFrom.secretKeyRef)")
    return gaps


def _kuberay_gaps(manifest: dict) -> tuple[bool, list[str]]:
    """(whether the head's dashboard listens on all interfaces, what lacks token auth)."""
    spec = manifest
    for key in KUBERAY_KINDS[manifest["kind"]]:
        spec = spec[key]
    head = spec["headGroupSpec"]
    groups = [("head", head)] + [(g.get("groupName", "?"), g) for g in spec.get("workerGroupSpecs", [])]
    # KubeRay binds the head's dashboard to 0.0.0.0 when rayStartParams leaves dashboard-host out.
    exposed = head.get("rayStartParams", {}).get("dashboard-host", "0.0.0.0") == "0.0.0.0"
    gaps: list[str] = []
    auth = spec.get("authOptions") or {}
    if auth:
        if auth.get("mode", "token") != "token":
            gaps.append(f"authOptions.mode is {auth.get('mode')!r}, not token")
        if not auth.get("secretName"):
            gaps.append("authOptions.secretName missing: the token would be one the operator makes up per cluster")
        # The operator leaves an env var a container already sets alone, so one saying
        # anything but token would switch authOptions off for that container.
        for name, group in groups:
            for c in group["template"]["spec"].get("containers", []):
                mode = _env(c).get("RAY_AUTH_MODE")
                if mode is not None and mode.get("value") != "token":
                    gaps.append(f"{name}/{c.get('name')}: RAY_AUTH_MODE={mode.get('value')!r} overrides authOptions")
        return exposed, gaps
    for name, group in groups:  # no authOptions: the Ray container of every group carries it itself
        containers = group["template"]["spec"].get("containers") or [{}]
        gaps += _env_gaps(f"no authOptions; {name}/{containers[0].get('name')}", _env(containers[0]))
    if spec.get("enableInTreeAutoscaling"):  # the autoscaler talks to the GCS too
        gaps += _env_gaps("no authOptions; autoscalerOptions", _env(spec.get("autoscalerOptions") or {}))
    return exposed, gaps


def auth_gaps(doc: dict) -> tuple[bool, list[str]]:
    """(dashboard on all interfaces, what in this config document lacks token auth)."""
    if "head_start_ray_commands" in doc:
        return _launcher_gaps(doc)
    if doc.get("kind") in KUBERAY_KINDS:
        return _kuberay_gaps(doc)
    return False, []


def _exposed_without_auth(doc: dict) -> list[str]:
    exposed, gaps = auth_gaps(doc)
    return gaps if exposed else []


def literal_tokens(text: str, docs: list[dict]) -> list[str]:
    """Places in one file that look like a token written into it."""
    found = [f"RAY_AUTH_TOKEN set to a literal: {m.group(0)!r}" for m in _TOKEN_ASSIGNMENT.finditer(text)]
    found += [f"a {len(m.group(0))}-character hex string" for m in _HEX_SECRET.finditer(text)]
    found += [f"a Secret made from a literal: {m.group(0)!r}" for m in _FROM_LITERAL.finditer(text)]

    def walk(node) -> None:
        if isinstance(node, dict):
            if node.get("name") == "RAY_AUTH_TOKEN" and "value" in node:
                found.append("env RAY_AUTH_TOKEN with a literal value")
            if node.get("kind") == "Secret" and (node.get("data") or node.get("stringData")):
                found.append(f"Secret {node.get('metadata', {}).get('name')!r} with its data in the file")
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    for d in docs:
        walk(d)
    return found


# ----------------------------------------------------------------------------- the shipped files

def test_every_cluster_yaml_is_checked():
    names = {p.relative_to(CLUSTER).as_posix() for p in YAMLS}
    assert {"aws.yaml", "gcp.yaml", "kuberay/raycluster.yaml", "kuberay/rayjob-train.yaml",
            "kuberay/rayservice.yaml"} <= names
    # The rule is not vacuous: it sees the all-interfaces dashboards these files do have.
    exposed = {p.relative_to(CLUSTER).as_posix() for p in YAMLS for d in _docs(p) if auth_gaps(d)[0]}
    assert {"aws.yaml", "gcp.yaml", "kuberay/raycluster.yaml", "kuberay/rayjob-train.yaml",
            "kuberay/rayservice.yaml"} <= exposed


@pytest.mark.parametrize("path", YAMLS, ids=lambda p: p.relative_to(CLUSTER).as_posix())
def test_exposed_dashboards_require_the_token(path):
    docs = _docs(path)
    for doc in docs:
        assert _exposed_without_auth(doc) == [], f"{path.relative_to(REPO)}: {_exposed_without_auth(doc)}"
    # A 0.0.0.0 dashboard in a file of a shape this test does not know would otherwise pass unseen.
    if _ANY_ALL_INTERFACES.search(path.read_text()):
        assert any(auth_gaps(d)[0] for d in docs), (
            f"{path.relative_to(REPO)} binds a dashboard to 0.0.0.0 in a config this test cannot read: "
            "teach auth_gaps its shape")


@pytest.mark.parametrize("path", sorted(p for p in CLUSTER.rglob("*") if p.is_file()),
                         ids=lambda p: p.relative_to(CLUSTER).as_posix())
def test_no_token_is_written_in_any_cluster_file(path):
    text = path.read_text(errors="replace")
    docs = _docs(path) if path.suffix in {".yaml", ".yml"} else []
    assert literal_tokens(text, docs) == [], f"{path.relative_to(REPO)}"


# ----------------------------------------------------------------------------- the rule itself

def _load(name: str) -> dict:
    return yaml.safe_load((CLUSTER / name).read_text())


def _strip_from_command(cfg: dict, key: str, pattern: str) -> dict:
    cfg = copy.deepcopy(cfg)
    cfg[key] = [re.sub(pattern, "", c) for c in cfg[key]]
    return cfg


@pytest.mark.parametrize("name", ["aws.yaml", "gcp.yaml"])
def test_launcher_rule_catches_each_missing_piece(name):
    cfg = _load(name)
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        no_mode = _strip_from_command(cfg, key, r"RAY_AUTH_MODE=token ?")
        assert any("RAY_AUTH_MODE" in g for g in _exposed_without_auth(no_mode)), key
        no_path = _strip_from_command(cfg, key, r"RAY_AUTH_TOKEN_PATH=\S+;?")
        assert any("RAY_AUTH_TOKEN_PATH" in g for g in _exposed_without_auth(no_path)), key
    unmounted = copy.deepcopy(cfg)
    unmounted["file_mounts"] = {k: v for k, v in cfg["file_mounts"].items() if "ray_auth_token" not in k}
    assert any("file_mounts" in g for g in _exposed_without_auth(unmounted))
    in_repo = copy.deepcopy(cfg)
    in_repo["file_mounts"]["~/ray_auth_token"] = "cluster/ray_auth_token"
    assert any("inside the repository" in g for g in _exposed_without_auth(in_repo))
    # A head bound to loopback alone is not what this rule is about.
    private = _strip_from_command(cfg, "head_start_ray_commands", r"RAY_AUTH_MODE=token ?")
    private["head_start_ray_commands"] = [c.replace("0.0.0.0", "127.0.0.1") for c in private["head_start_ray_commands"]]
    assert _exposed_without_auth(private) == []


def _cluster(manifest: dict) -> dict:
    spec = manifest
    for key in KUBERAY_KINDS[manifest["kind"]]:
        spec = spec[key]
    return spec


@pytest.mark.parametrize("name", ["kuberay/raycluster.yaml", "kuberay/rayjob-train.yaml", "kuberay/rayservice.yaml"])
def test_kuberay_rule_catches_each_missing_piece(name):
    manifest = _load(name)
    removed = copy.deepcopy(manifest)
    del _cluster(removed)["authOptions"]
    assert _exposed_without_auth(removed), "authOptions removed, yet no gap reported"
    # The dashboard-host line removed too: KubeRay's default is still 0.0.0.0.
    del _cluster(removed)["headGroupSpec"]["rayStartParams"]["dashboard-host"]
    assert _exposed_without_auth(removed)
    disabled = copy.deepcopy(manifest)
    _cluster(disabled)["authOptions"]["mode"] = "disabled"
    assert any("not token" in g for g in _exposed_without_auth(disabled))
    generated = copy.deepcopy(manifest)
    del _cluster(generated)["authOptions"]["secretName"]
    assert any("secretName" in g for g in _exposed_without_auth(generated))
    overridden = copy.deepcopy(manifest)
    worker = _cluster(overridden)["workerGroupSpecs"][-1]["template"]["spec"]["containers"][0]
    worker.setdefault("env", []).append({"name": "RAY_AUTH_MODE", "value": "disabled"})
    assert any("overrides authOptions" in g for g in _exposed_without_auth(overridden))


def test_kuberay_rule_accepts_env_from_a_secret_on_every_container():
    """The other way to configure it (KubeRay before authOptions): env on each Ray container and
    the autoscaler, the token from a secretKeyRef. Missing on one worker group is a gap."""
    manifest = _load("kuberay/raycluster.yaml")
    spec = _cluster(manifest)
    del spec["authOptions"]
    env = [{"name": "RAY_AUTH_MODE", "value": "token"},
           {"name": "RAY_AUTH_TOKEN", "valueFrom": {"secretKeyRef": {"name": "relate-ray-token", "key": "auth_token"}}}]
    for group in [spec["headGroupSpec"]] + spec["workerGroupSpecs"]:
        group["template"]["spec"]["containers"][0]["env"] = copy.deepcopy(env)
    spec["autoscalerOptions"]["env"] = copy.deepcopy(env)
    assert _exposed_without_auth(manifest) == []
    missing = copy.deepcopy(manifest)
    _cluster(missing)["workerGroupSpecs"][1]["template"]["spec"]["containers"][0]["env"] = env[:1]
    assert any("a100" in g and "Secret" in g for g in _exposed_without_auth(missing))
    no_autoscaler = copy.deepcopy(manifest)
    del _cluster(no_autoscaler)["autoscalerOptions"]["env"]
    assert any("autoscalerOptions" in g for g in _exposed_without_auth(no_autoscaler))


def test_literal_token_rule():
    token = "0123456789abcdef" * 4
    assert literal_tokens(f"export RAY_AUTH_TOKEN={token};", [])
    assert literal_tokens("RAY_AUTH_TOKEN: raycluster_secret\n", [])
    assert literal_tokens("", [{"env": [{"name": "RAY_AUTH_TOKEN", "value": "x"}]}])
    assert literal_tokens("", [{"kind": "Secret", "metadata": {"name": "t"}, "stringData": {"auth_token": "x"}}])
    assert literal_tokens(f"# kubectl create secret ... --from-literal=auth_token={token}", [])
    assert literal_tokens("kubectl create secret generic t --from-literal=auth_token=raycluster_secret", [])
    # Expansions and references are how the token should arrive.
    assert literal_tokens("export RAY_AUTH_TOKEN=$(cat ~/ray_auth_token); RAY_AUTH_TOKEN_PATH=$HOME/t", []) == []
    assert literal_tokens("RAY_AUTH_TOKEN= ray job submit", []) == []
    assert literal_tokens("--from-literal=auth_token=$(ray get-auth-token 2>/dev/null)", []) == []
    assert literal_tokens("", [{"env": [{"name": "RAY_AUTH_TOKEN",
                                         "valueFrom": {"secretKeyRef": {"name": "s", "key": "auth_token"}}}]}]) == []
