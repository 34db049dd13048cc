"""What the browser tests share: Debian's Chromium driven by Playwright (its own browser download
is not used), and the rule that a missing browser fails under CI and skips loudly elsewhere."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

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
