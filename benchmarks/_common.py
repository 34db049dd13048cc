"""The benchmarks contract: ``python -m benchmarks.<name> [--quick] [--out FILE]`` prints and
writes one JSON object ``{"benchmark", "figures", "env"}``. Timings are ratios against a
baseline measured in the same run, because these machines are shared and noisy."""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

__all__ = ["run_benchmark", "environment", "best_of"]


def environment() -> dict[str, object]:
    env: dict[str, object] = {"cpu_count": os.cpu_count(), "python": platform.python_version(),
                              "machine": platform.machine()}
    for mod in ("torch", "ray", "numpy", "pyarrow", "timm", "transformers"):
        m = sys.modules.get(mod)
        if m is not None:
            env[mod] = getattr(m, "__version__", "?")
    return env


def best_of(fn: Callable[[], object], repeats: int) -> float:
    """Minimum wall time of ``repeats`` calls (the least-disturbed run on a noisy machine)."""
    best = float("inf")
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def run_benchmark(name: str, measure: Callable[[bool], dict[str, float]], argv: Sequence[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(prog=f"python -m benchmarks.{name}")
    ap.add_argument("--quick", action="store_true", help="fewer repetitions; under 60 s on 2 cores")
    ap.add_argument("--out", default=None, help="also write the JSON result to this file")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    t0 = time.perf_counter()
    figures = measure(args.quick)
    result = {"benchmark": name, "figures": figures, "env": environment(),
              "quick": bool(args.quick), "wall_s": round(time.perf_counter() - t0, 2)}
    text = json.dumps(result, indent=2, sort_keys=False)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    return result
