"""What the browser tests share: Debian's Chromium driven by Playwright (its own browser download
is not used), the rule that a missing browser fails under CI and skips loudly elsewhere, and the
page server each test starts in its own process (and kills, to show nothing depends on a clean exit)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path

import httpx
import pytest

try:
    from playwright import sync_api
except ImportError:
    sync_api = None

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def require_browser(what: str) -> None:
    """With ``CI`` set a missing browser is a failure; elsewhere a skip that says so loudly."""
    missing = ([] if Path(CHROMIUM).is_file() else [f"{CHROMIUM} is missing (apt-get install -y chromium)"]) + \
              ([] if sync_api is not None else ["playwright is missing (pip install playwright)"])
    if not missing:
        return
    why = "; ".join(missing)
    if in_ci():
        pytest.fail(f"CI is set but the {what} browser test cannot run: {why}", pytrace=False)
    warnings.warn(f"{what.upper()} BROWSER TEST NOT RUN: {why}; with CI set this is a failure", stacklevel=2)
    pytest.skip(f"{what.upper()} BROWSER TEST NOT RUN: {why} (fails instead when CI is set)")


REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PageServer:
    """``python -m <module> <args> --port <port>`` from the repository, logging to ``log``; ``tokens``
    maps a person to their bearer token (None: the page runs without tokens)."""

    def __init__(self, module: str, args: list[str], port: int, log: Path, tokens: dict[str, str] | None) -> None:
        self.module, self.args, self.port, self.log, self.proc, self.tokens = module, args, port, log, None, tokens

    def headers(self, who: str = "alice") -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"} if self.tokens else {}

    def start(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen([sys.executable, "-m", self.module, *self.args, "--port", str(self.port)],
                                     cwd=REPO, env=env, stdout=self.log.open("a"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"server exited: {self.log.read_text()[-2000:]}"
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/api/health", headers=self.headers(),
                             timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.2)
        raise AssertionError(f"server did not come up: {self.log.read_text()[-2000:]}")

    def kill(self) -> None:
        """SIGKILL, not a polite shutdown: durability must not depend on a clean exit."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
