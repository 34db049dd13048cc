"""tests/gpu: CUDA against CPU, fp32 with TF32 off; a dry run on CPU for machines without CUDA.

tests/conftest.py marks these tests ``gpu`` and skips them when ``torch.cuda.is_available()`` is
False. ``RELATE_TEST_GPU_DEVICE=cpu`` (dry runs only: it proves nothing about a GPU) runs them
anyway with the CPU as the device under test, so every code path and comparison is exercised
where there is no CUDA:

    RELATE_TEST_GPU_DEVICE=cpu .venv/bin/python -m pytest -q tests/gpu
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from _gpu_common import DEVICE_ENV, device_under_test, fp32_reference_flags

_HERE = Path(__file__).parent


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With RELATE_TEST_GPU_DEVICE set, lift the root conftest's "needs CUDA" skip from these tests."""
    if not os.environ.get(DEVICE_ENV, "").strip():
        return
    for item in items:
        if _HERE in Path(str(item.fspath)).parents:
            item.own_markers[:] = [m for m in item.own_markers
                                   if not (m.name == "skip" and m.kwargs.get("reason") == "needs CUDA")]


def pytest_report_header(config: pytest.Config) -> list[str]:
    dut = device_under_test()
    name = torch.cuda.get_device_name(dut) if dut.type == "cuda" and torch.cuda.is_available() else str(dut)
    return [f"tests/gpu: device under test {dut} ({name}), reference cpu; torch {torch.__version__}, "
            f"CUDA {torch.version.cuda}"
            + (f"; {DEVICE_ENV}={os.environ[DEVICE_ENV]} (dry run)" if os.environ.get(DEVICE_ENV) else "")]


@pytest.fixture(autouse=True)
def fp32_without_tf32():
    """fp32 parity needs IEEE fp32 products on the GPU: TF32 (10-bit mantissa) off in cuBLAS and cuDNN
    (the patch embedding is a convolution). Only the legacy flags are touched: torch refuses to read
    TF32 state set through a mix of the legacy and the ``fp32_precision`` API."""
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    assert fp32_reference_flags() == {"torch.backends.cuda.matmul.allow_tf32": False,
                                      "torch.backends.cudnn.allow_tf32": False}
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


@pytest.fixture(scope="session")
def dev() -> torch.device:
    return device_under_test()
