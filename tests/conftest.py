"""Shared test setup: offline model hubs, deterministic seeds, markers by folder."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

# No model hub is reachable here; without this every hub miss retries for ~26 s.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
# Large text banks (relate.text.bank) are kept for this session only, shared by its tests and the
# jobs they start (the packaged vocabulary is embedded once, not by every job that scores with it).
os.environ.setdefault("RELATE_BANK_CACHE", tempfile.mkdtemp(prefix="relate-banks-"))

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
