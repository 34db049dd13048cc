"""Modules that must import without torch (and without scikit-learn / scipy): the evaluator's
metrics (a scoring job should not pay seconds of imports before reading a file) and the Serve
ingress with its configs (every ingress replica start would pay them)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("module", ["relate.metrics", "serve_apps.app", "serve_apps.config", "relate.model.config"])
def test_imports_without_heavy_libraries(module):
    code = (f"import sys, {module}; heavy = [m for m in ('torch', 'timm', 'sklearn', 'scipy', 'transformers') "
            "if m in sys.modules]; print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "", f"importing {module} loads {out.stdout.strip()}"
