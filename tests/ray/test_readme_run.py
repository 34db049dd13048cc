"""``make demo``, then every command of the README's shell blocks, run for real in the README's order.

The checkout's files are copied into a temporary folder that stands for a fresh clone (with the
environment running the tests as its ``.venv``); the commands run from there as typed, so their
``runs/`` is the copy's and the checkout's own is left alone. What differs from a user's terminal,
and why:

* size: the demo builds a small world and trains a few steps (``make demo DEMO_ARGS=...``); a
  command that builds a world or trains gets the ``--set`` overrides of ``SIZE`` appended (fewer
  scenes, steps and seeds, never another recipe), and a benchmark ``--quick`` (DESIGN's contract:
  every figure, fewer repetitions; ``annotate_scale`` also at a few hundred records);
* what the host may already use: the Serve and docs ports become free ones, a path under /tmp a
  folder of the copy, and each command's Ray its own (``RAY_TMPDIR`` in the copy);
* the cluster block runs against this test's own Ray head in token mode (``ray start --head`` with
  ``RAY_AUTH_MODE=token``, the token file standing for ``~/.ray/auth_token``), whose
  ``RELATE_ROOT`` (the cluster's /mnt/shared in cluster/runtime_env.yaml) is a folder of the copy
  holding the demo's world; a command marked ``cluster only`` in the README (the released recipe
  needs GPUs) runs as its dry run, ``scripts.submit_job`` without ``--submit``, which validates
  the config as the cluster would and prints the submission;
* ``make test`` is the suite this test belongs to and is not run; ``make docs`` and ``serve run``
  are servers: each is started, asked over HTTP and stopped. The served model must be the newest
  checkpoint under the copy's ``runs/`` (the README's training run), named on its start-up line,
  and must answer ``POST /v1/relations`` for the demo's scene.

Every other command must exit 0; a command of a kind this file has no rule for fails the test.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from _ray_local_cluster import TokenHead
from _readme import REPO, Command, readme_commands

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
DEMO_ARGS = "--scenes 40 --steps 4"
# demo-size overrides appended to a command of these modules (later --set values win)
SIZE = {
    "train_jobs.train_relation": ["--set", "optim.max_steps=4"],
    "pipelines.synthetic": ["--set", "num_scenes=40"],
    "benchmarks.annotate_scale": ["--quick", "--sizes", "200", "600"],
    "train_jobs.learning_curve": ["--set", "steps=4", "--set", "eval_every=4", "--set", "seeds=[0]",
                                  "--set", "eval_images=6"],
}
COMMAND_TIMEOUT_S = 600
SERVER_TIMEOUT_S = 300
# the copy holds the sources and configs, not what a run or an install leaves in the checkout
_NOT_COPIED = shutil.ignore_patterns(".git", ".venv", "runs", "site", "__pycache__", "*.egg-info", ".pytest_cache",
                                     ".hypothesis", "relate_out")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Clone:
    """The copied tree, its environment and a log of every command run in it."""

    def __init__(self, root: Path) -> None:
        self.root, self.tree = root, root / "repo"
        shutil.copytree(REPO, self.tree, ignore=_NOT_COPIED, symlinks=True)
        (self.tree / ".venv").symlink_to(BIN.parent)
        self.serve_port, self.docs_port = _free_port(), _free_port()
        local = self.tree / "serve_apps/configs/local.yaml"
        local.write_text(local.read_text().replace("port: 8000", f"port: {self.serve_port}"))
        self.logs = root / "logs"
        self.logs.mkdir()
        (root / "ray").mkdir()
        self.env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0",
                    "RAY_TMPDIR": str(root / "ray"), "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
        # a new user's shell: none of what other tests of this session set (tests/ray/conftest.py puts
        # a Serve token and the proxy's token callback in os.environ for its in-process Ray)
        for var in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RELATE_ROOT",
                    "RELATE_API_TOKEN", "RELATE_API_TOKEN_FILE", "RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH"):
            self.env.pop(var, None)
        self.head: TokenHead | None = None
        self.count = 0

    def argv(self, argv: list[str]) -> list[str]:
        """Executables from the tested environment; paths under /tmp moved into the copy."""
        exe = Path(argv[0]).name
        first = sys.executable if exe.startswith("python") else str(BIN / exe) if (BIN / exe).exists() else argv[0]
        return [first] + [a.replace("/tmp/", f"{self.root}/tmp/") for a in argv[1:]]

    def run(self, argv: list[str], why: str, timeout: float = COMMAND_TIMEOUT_S) -> str:
        self.count += 1
        log = self.logs / f"{self.count:02d}.log"
        t0 = time.monotonic()
        with open(log, "w") as fh:
            proc = subprocess.run(argv, cwd=self.tree, env=self.env, stdout=fh, stderr=subprocess.STDOUT,
                                  timeout=timeout, start_new_session=True)
        out = log.read_text(errors="replace")
        print(f"[{time.monotonic() - t0:5.0f} s] {why}", flush=True)
        assert proc.returncode == 0, f"`{why}` exited {proc.returncode}:\n{out[-3000:]}"
        return out

    def start(self, argv: list[str]) -> tuple[subprocess.Popen, Path]:
        self.count += 1
        log = self.logs / f"{self.count:02d}.log"
        with open(log, "w") as fh:
            proc = subprocess.Popen(argv, cwd=self.tree, env=self.env, stdout=fh, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        return proc, log

    def close(self) -> None:
        if self.head is not None:
            self.head.close()
        for pid in _processes_naming(str(self.root)):  # anything a command's Ray left behind
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _processes_naming(text: str) -> list[int]:
    out = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            try:
                if text in (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                    out.append(int(proc.name))
            except OSError:
                continue
    return out


def _stop(proc: subprocess.Popen) -> None:
    """Ctrl-C as a user stops a server, then whatever of its process group is left."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=10)


def _wait_http(proc: subprocess.Popen, log: Path, url: str, what: str) -> None:
    import requests

    deadline = time.monotonic() + SERVER_TIMEOUT_S
    while True:
        assert proc.poll() is None, f"{what} exited {proc.returncode}:\n{log.read_text(errors='replace')[-3000:]}"
        try:
            if requests.get(url, timeout=5).status_code == 200:
                return
        except requests.RequestException:
            pass
        assert time.monotonic() < deadline, f"{what}: {url} not answering after {SERVER_TIMEOUT_S} s"
        time.sleep(1.0)


def _serve(clone: Clone, cmd: Command) -> None:
    """``serve run``: the start-up line names the newest checkpoint under runs/, which answers a request."""
    import requests

    from relate.checkpoint import find_latest_checkpoint

    newest = find_latest_checkpoint(clone.tree / "runs")
    assert newest is not None and "ray_train" in newest.parts, f"the README's training left no checkpoint: {newest}"
    t0 = time.monotonic()
    proc, log = clone.start(clone.argv(cmd.argv))
    try:
        _wait_http(proc, log, f"http://127.0.0.1:{clone.serve_port}/readyz", cmd.line)
        named = re.findall(r"relation model serves checkpoint (\S+)", log.read_text(errors="replace"))
        assert named and Path(named[-1]) == newest.resolve(), (named, newest)
        scene = clone.tree / "runs/demo/serve"
        boxes = json.loads((scene / "boxes.json").read_text())["scene.png"]
        body = {"image": base64.b64encode((scene / "scene.png").read_bytes()).decode(), "boxes": boxes, "topk": 5}
        r = requests.post(f"http://127.0.0.1:{clone.serve_port}/v1/relations", json=body, timeout=120)
        assert r.status_code == 200, r.text
        assert len(r.json()["triplets"]) == 5
    finally:
        _stop(proc)
    print(f"[{time.monotonic() - t0:5.0f} s] {cmd.line}", flush=True)


def _docs_server(clone: Clone) -> None:
    t0 = time.monotonic()
    proc, log = clone.start(["make", "-o", "venv", "docs", f"DOCS_ADDR=127.0.0.1:{clone.docs_port}"])
    try:
        _wait_http(proc, log, f"http://127.0.0.1:{clone.docs_port}/jobs/training/", "make docs")
    finally:
        _stop(proc)
    print(f"[{time.monotonic() - t0:5.0f} s] make docs", flush=True)


def _cluster_head(clone: Clone) -> TokenHead:
    """This test's token-mode head, its RELATE_ROOT a folder of the copy holding the demo's world."""
    if clone.head is None:
        shared = clone.root / "shared"
        (shared / "runs/demo").mkdir(parents=True)
        (shared / "runs/demo/synthetic").symlink_to(clone.tree / "runs/demo/synthetic")
        spec = clone.tree / "cluster/runtime_env.yaml"
        spec.write_text(spec.read_text().replace("RELATE_ROOT: /mnt/shared", f"RELATE_ROOT: {shared}"))
        head = TokenHead(head_cpus=2, dashboard=True, root=Path(tempfile.mkdtemp(prefix="rh-", dir=clone.root)))
        head.env["PATH"] = clone.env["PATH"]
        clone.head = head
        head.start_head()
    return clone.head


def _export(clone: Clone, cmd: Command) -> None:
    for item in cmd.argv[1:]:
        key, value = item.split("=", 1)
        if key == "RAY_ADDRESS":  # the README's dashboard tunnel: this test's head
            value = _cluster_head(clone).dashboard_url
        clone.env[key] = value
    if clone.head is not None:  # where a user's ~/.ray/auth_token would be
        clone.env["RAY_AUTH_TOKEN_PATH"] = str(clone.head.token_file)


def _module(argv: list[str]) -> str | None:
    return argv[argv.index("-m") + 1] if "-m" in argv[:-1] else None


def _sized(argv: list[str]) -> list[str]:
    module = _module(argv)
    if module in SIZE:
        return argv + SIZE[module]
    if module and module.startswith("benchmarks."):
        return argv + ["--quick"]
    return argv


def _run_command(clone: Clone, cmd: Command) -> None:
    argv, exe = cmd.argv, Path(cmd.argv[0]).name
    if argv == ["make", "test"]:
        return  # the suite this test is part of
    if argv == ["make", "demo"]:
        out = clone.run(["make", "-o", "venv", "demo", f"DEMO_ARGS={DEMO_ARGS}"], f"make demo ({DEMO_ARGS})")
        # the summary holds the model to the world's truth beside the share the annotation states
        assert re.search(r"AP against every relation that holds[^\n]*\n +[^\n]*contact \d\.\d\d \(\d+%\)", out), out[-3000:]
        from relate.checkpoint import find_latest_checkpoint

        demo = Path((clone.tree / "runs/demo/train/LATEST").read_text().strip())
        assert find_latest_checkpoint(clone.tree / "runs") == demo  # what serve run would serve now
        assert (clone.tree / "runs/demo/checkpoint").resolve() == demo.resolve()
    elif argv == ["make", "docs"]:
        _docs_server(clone)
    elif argv[0] == "make":
        clone.run(["make", "-o", "venv", *argv[1:]], cmd.line)
    elif exe == "export":
        _export(clone, cmd)
    elif exe == "serve" and argv[1:2] == ["run"]:
        _serve(clone, cmd)
    elif exe == "ray" and argv[1:3] == ["job", "submit"]:
        assert "RAY_ADDRESS" in clone.env, f"{cmd.line}: the README sets no RAY_ADDRESS before it"
        out = clone.run(clone.argv(argv), cmd.line)
        assert re.search(r"Job '[^']+' succeeded", out), out[-3000:]
    elif cmd.cluster_only and _module(argv) == "scripts.submit_job":
        out = clone.run(clone.argv([a for a in argv if a != "--submit"]), f"{cmd.line} (dry run: cluster only)")
        assert "ray job submit" in out, out[-2000:]
    elif exe.startswith("python") or exe == "relate":
        clone.run(clone.argv(_sized(argv)), cmd.line)
    else:
        pytest.fail(f"no rule to run this README command (add one to {Path(__file__).name}): {cmd.line}")


@pytest.mark.timeout(3600)  # about 15 minutes on 2 cores beside other jobs; every command's time is printed
def test_every_readme_command_runs_after_make_demo():
    commands = readme_commands()
    assert commands[:2] == [Command(["make", "demo"], commands[0].comment), Command(["make", "test"], commands[1].comment)]
    clone = Clone(Path(tempfile.mkdtemp(prefix="rm-", dir="/tmp")))  # short: Ray's socket paths live under it
    try:
        for cmd in commands:
            _run_command(clone, cmd)
    finally:
        clone.close()
    shutil.rmtree(clone.root, ignore_errors=True)
