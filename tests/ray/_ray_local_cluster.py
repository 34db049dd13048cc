"""A real multi-node Ray cluster on one machine, for tests: `ray start --head` plus worker nodes
started with `ray start --address`, each node its own raylet in its own process group.

Not a test module. Used by test_job_api.py, test_multinode.py, test_cluster_token_auth.py and
test_readme_run.py. Every node runs
``ray start --block`` in a new session, so stopping a node means killing exactly that process
group (what losing a machine looks like to Ray) and nothing else on the host; ``close()`` tears
every node down and is safe to call twice.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RAY_BIN = str(Path(sys.executable).with_name("ray"))

# Faster node-death detection than the 30 s-scale defaults, so a killed worker is noticed in a
# few seconds; isolated from any Ray instance other tests or engineers run on this host.
MAX_START_RETRIES = 2

_ENV = {
    "RAY_AUTH_MODE": "disabled",  # loopback-only throwaway cluster; no token to distribute
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
    "RAY_health_check_initial_delay_ms": "1000",
    "RAY_DATA_DISABLE_PROGRESS_BARS": "1",
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _node_ports() -> list[str]:
    # Non-default ports for everything a node binds, so nodes on one host never collide.
    out = []
    for flag in ("--node-manager-port", "--object-manager-port", "--dashboard-agent-listen-port",
                 "--dashboard-agent-grpc-port", "--metrics-export-port", "--runtime-env-agent-port"):
        out += [flag, str(_free_port())]
    return out


@dataclass
class Node:
    name: str
    proc: subprocess.Popen
    resources: dict[str, float]
    log: Path
    node_id: str | None = None
    alive: bool = True
    args: list[str] = field(default_factory=list)
    retries: int = 0


@dataclass
class LocalCluster:
    """Head (optionally with the dashboard) plus named worker nodes, all on 127.0.0.1."""

    head_cpus: int = 0
    dashboard: bool = True
    object_store_mb: int = 150
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="rl-", dir="/tmp")))
    nodes: dict[str, Node] = field(default_factory=dict)
    head_args: list[str] = field(default_factory=list)  # more `ray start --head` flags (--autoscaling-config)

    def __post_init__(self) -> None:
        self.gcs_port = _free_port()
        self.dashboard_port = _free_port()
        self.env = {**os.environ, **_ENV}
        self.env.pop("RAY_ADDRESS", None)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.gcs_port}"

    @property
    def dashboard_url(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    def _spawn(self, name: str, args: list[str], resources: dict[str, float], retries: int = 0) -> Node:
        log = self.root / f"{name}-{retries}.log"
        temp = [] if "--head" in args else ["--temp-dir", str(self.root / f"{name}-{retries}")]  # own dir per node
        cmd = [RAY_BIN, "start", "--block", "--node-ip-address", "127.0.0.1",
               "--object-store-memory", str(self.object_store_mb * 2**20), "--disable-usage-stats",
               "--resources", json.dumps(resources), *_node_ports(), *temp, *args]
        with open(log, "w") as fh:
            proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=self.env,
                                    start_new_session=True, cwd=str(self.root))
        node = Node(name, proc, resources, log, args=args, retries=retries)
        self.nodes[name] = node
        return node

    def start_head(self, resources: dict[str, float] | None = None) -> Node:
        """Start the head and wait until it is up (dashboard included); like a worker, a head
        whose raylet misses `ray start`'s fixed 30 s registration window is started again."""
        for attempt in range(MAX_START_RETRIES + 1):
            if attempt:  # fresh ports: the dead head's may linger
                self.gcs_port, self.dashboard_port = _free_port(), _free_port()
            args = ["--head", "--port", str(self.gcs_port), "--num-cpus", str(self.head_cpus),
                    "--temp-dir", str(self.root / f"ray{attempt}"), "--ray-client-server-port", str(_free_port()),
                    "--include-dashboard", "true" if self.dashboard else "false"]
            if self.dashboard:
                args += ["--dashboard-host", "127.0.0.1", "--dashboard-port", str(self.dashboard_port)]
            args += self.head_args
            head = self._spawn("head", args, resources or {}, retries=attempt)
            if not self.dashboard:
                return head
            try:
                self.wait_for_nodes(timeout=120)  # workers join a head that is fully up
                return head
            except RuntimeError:
                if attempt == MAX_START_RETRIES:
                    raise
                self._kill_group(head)
        raise AssertionError("unreachable")

    def add_worker(self, name: str, num_cpus: int, resources: dict[str, float], wait: bool = True) -> Node:
        """Start a worker node (its own temp dir, as on a separate machine: nodes sharing one
        would share, and garbage-collect, each other's runtime_env working_dir packages)."""
        resources = {**resources, f"node_{name}": 1}
        node = self._spawn(name, ["--address", self.address, "--num-cpus", str(num_cpus)], resources)
        if wait:
            self.wait_for_nodes(timeout=120)
        return node

    def wait_for_nodes(self, timeout: float = 90.0) -> None:
        """Block until every started node is alive in the GCS; records each node's id."""
        from ray.util.state import list_nodes

        deadline = time.monotonic() + timeout
        want = {n.name for n in self.nodes.values() if n.alive}
        while True:
            self._check_processes()
            try:
                alive = [n for n in list_nodes(address=self.dashboard_url, raise_on_missing_output=False)
                         if n.state == "ALIVE"] if self.dashboard else []
            except Exception:  # the dashboard may still be coming up
                alive = []
            matched = self._match(alive)
            if want <= matched:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"nodes {sorted(want - matched)} not alive after {timeout:.0f} s; logs in {self.root}")
            time.sleep(1.0)

    def _match(self, alive) -> set[str]:
        # A node is recognised by its unique custom resource set (each worker gets a `node_<name>` key).
        matched = set()
        for info in alive:
            total = info.resources_total or {}
            if info.is_head_node:
                self.nodes["head"].node_id = info.node_id
                matched.add("head")
                continue
            for node in self.nodes.values():
                if f"node_{node.name}" in total:
                    node.node_id = info.node_id
                    matched.add(node.name)
        return matched

    def _check_processes(self) -> None:
        """Fail on a node that died, except a worker still starting: `ray start` gives its
        raylet a fixed 30 s to register, which a loaded 2-core host can miss; start it again."""
        for node in list(self.nodes.values()):
            if not node.alive or node.proc.poll() is None:
                continue
            if node.name != "head" and node.node_id is None and node.retries < MAX_START_RETRIES:
                self._kill_group(node)
                self._spawn(node.name, node.args, node.resources, retries=node.retries + 1)
                continue
            tail = node.log.read_text()[-2000:] if node.log.exists() else ""
            raise RuntimeError(f"`ray start` for node {node.name} exited with {node.proc.returncode}:\n{tail}")

    @staticmethod
    def _kill_group(node: Node, sig: int = signal.SIGKILL) -> None:
        try:
            os.killpg(node.proc.pid, sig)
        except ProcessLookupError:
            pass

    def kill_node(self, name: str) -> None:
        """Lose a node: SIGKILL its raylet, object store, agents and workers at once."""
        node = self.nodes[name]
        self._kill_group(node)
        node.proc.wait(timeout=10)
        node.alive = False

    def job_client(self, timeout: float = 60.0):
        from ray.job_submission import JobSubmissionClient

        deadline = time.monotonic() + timeout
        while True:
            try:
                return JobSubmissionClient(self.dashboard_url)
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def close(self) -> None:
        """Stop every node (SIGTERM, then SIGKILL) and delete the temp folder."""
        live = [n for n in self.nodes.values() if n.proc.poll() is None]
        for node in reversed(live):  # workers first, head last
            try:
                os.killpg(node.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 3  # a throwaway cluster: no need for a slow graceful drain
        for node in live:
            try:
                node.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for node in self.nodes.values():  # stragglers (raylet children) share the group
            try:
                os.killpg(node.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            node.alive = False
        for pid in self._strays():  # e.g. nodes an autoscaler started: same temp dir, maybe another group
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.root, ignore_errors=True)

    def _strays(self) -> list[int]:
        """Live processes of this cluster by PID: every Ray process names its temp dir, under root."""
        out = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit() or int(proc.name) == os.getpid():
                continue
            try:
                cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if str(self.root) in cmd:
                out.append(int(proc.name))
        return out


@dataclass
class TokenHead(LocalCluster):
    """A head in token mode, as cluster/aws.yaml and gcp.yaml start theirs: ``RAY_AUTH_MODE=token``
    with ``RAY_AUTH_TOKEN_PATH`` naming a token file (``token_file``, mode 0600). Its readiness check
    asks the dashboard directly, with the token: Ray's state client sends a token only when its own
    process is in token mode."""

    token: str = field(default_factory=lambda: secrets.token_hex(32))  # as `ray get-auth-token --generate`

    def __post_init__(self) -> None:
        super().__post_init__()
        self.token_file = self.root / "ray_auth_token"
        self.token_file.write_text(self.token + "\n")  # Ray strips the newline `echo` or an editor leaves
        self.token_file.chmod(0o600)
        self.env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(self.token_file))
        self.env.pop("RAY_AUTH_TOKEN", None)  # it would take precedence over the file

    def headers(self, token: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {token or self.token}"}

    def wait_for_nodes(self, timeout: float = 120.0) -> None:
        import requests

        deadline = time.monotonic() + timeout
        while True:
            self._check_processes()
            try:
                r = requests.get(f"{self.dashboard_url}/api/v0/nodes", headers=self.headers(), timeout=10)
                nodes = r.json()["data"]["result"]["result"] if r.ok else []
                if any(n["is_head_node"] and n["state"] == "ALIVE" for n in nodes):
                    return
            except (requests.RequestException, ValueError, KeyError):
                pass  # the dashboard is still coming up
            if time.monotonic() > deadline:
                raise TimeoutError(f"token-mode head not alive after {timeout:.0f} s; logs in {self.root}")
            time.sleep(0.5)


@contextmanager
def head_with_workers(workers: dict[str, tuple[int, dict[str, float]]]):
    """A 0-CPU head with its dashboard plus the named workers (``{name: (num_cpus, resources)}``),
    all alive before the body runs; torn down afterwards whatever happens."""
    c = LocalCluster(head_cpus=0, dashboard=True)
    try:
        c.start_head()
        for name, (cpus, resources) in workers.items():
            c.add_worker(name, num_cpus=cpus, resources=resources)
        c.wait_for_nodes(timeout=120)
        yield c
    finally:
        c.close()


def project_runtime_env(**env_vars: str) -> dict:
    """cluster/runtime_env.yaml as a job would use it, with this host's working tree and no
    RELATE_ROOT unless given (``RELATE_ROOT=str(tmp_path)``)."""
    import yaml

    spec = yaml.safe_load((REPO / "cluster" / "runtime_env.yaml").read_text())
    spec.pop("pip", None)
    spec["working_dir"] = str(REPO)
    base = {k: v for k, v in spec.get("env_vars", {}).items() if k != "RELATE_ROOT"}  # the cluster's /mnt/shared
    spec["env_vars"] = {**base, **_ENV, **env_vars}
    spec["env_vars"].pop("RAY_AUTH_MODE", None)
    return spec


def wait_job(client, job_id: str, timeout: float) -> tuple[str, list[str]]:
    """Poll a job to a terminal state; returns (final status, the distinct statuses seen)."""
    from ray.job_submission import JobStatus

    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while True:
        status = client.get_job_status(job_id)
        if not seen or seen[-1] != status.value:
            seen.append(status.value)
        if status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
            return status.value, seen
        if time.monotonic() > deadline:
            client.stop_job(job_id)
            raise TimeoutError(f"job {job_id} still {status.value} after {timeout:.0f} s; statuses {seen}")
        time.sleep(0.5)
