"""Shared test setup: offline model hubs, deterministic seeds, markers by folder, failures said as they happen."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

# No model hub is reachable here; without this every hub miss retries for ~26 s.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
# Large text banks (relate.text.bank) are kept for this session only, shared by its tests and the
# jobs they start (the packaged vocabulary is embedded once, not by every job that scores with it).
_BANKS = None if "RELATE_BANK_CACHE" in os.environ else tempfile.mkdtemp(prefix="relate-banks-")
if _BANKS is not None:
    os.environ["RELATE_BANK_CACHE"] = _BANKS

import pytest  # noqa: E402

_TIER = {"unit": "unit", "ray": "ray", "gpu": "gpu", "e2e": "e2e"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test by its folder (tests/unit, tests/ray, tests/gpu, tests/e2e); skip gpu without CUDA."""
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except Exception:  # pragma: no cover
        has_cuda = False
    for item in items:
        parts = Path(str(item.fspath)).parts
        for folder, mark in _TIER.items():
            if folder in parts:
                item.add_marker(getattr(pytest.mark, mark))
        if "gpu" in parts and not has_cuda:
            item.add_marker(pytest.mark.skip(reason="needs CUDA"))


_START = time.monotonic()
_CONFIG: dict = {}  # the run's config, for its terminal reporter


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """A failure is printed when it happens, with its error's last line, not only in the summary: a
    run stopped from outside (CI's time limit) still says what failed and why."""
    if not report.failed:
        return
    crash = getattr(report.longrepr, "reprcrash", None)
    why = crash.message if crash is not None else (str(report.longrepr).strip().splitlines() or [""])[-1]
    why = " ".join(why.split())[:400]
    reporter = _CONFIG["config"].pluginmanager.get_plugin("terminalreporter") if _CONFIG else None
    line = f"FAILED {report.nodeid} ({report.when}, {time.monotonic() - _START:.0f} s into the run): {why}"
    if reporter is not None:
        reporter.write("\n")
        reporter.write_line(line, red=True)


def pytest_configure(config: pytest.Config) -> None:
    _CONFIG["config"] = config


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _BANKS is not None:
        shutil.rmtree(_BANKS, ignore_errors=True)
