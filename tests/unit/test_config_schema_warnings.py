"""Every module that defines a config imports without a pydantic schema warning.

A ``Location`` (an Annotated type carrying ``Field(validate_default=True)``) placed inside a union
or a container loses that ``Field`` and pydantic warns once per process at import, on every job's
console; such fields take ``LocationValue``. The imports run in a fresh interpreter, because a
module this test session imported earlier would not warn again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("relate", "actors", "pipelines", "train_jobs", "eval_jobs", "serve_apps")

_SCRIPT = """
import importlib, sys, warnings
from pydantic.warnings import UnsupportedFieldAttributeWarning
warnings.simplefilter("error", UnsupportedFieldAttributeWarning)
for name in sys.argv[1:]:
    importlib.import_module(name)
"""


def _config_modules() -> list[str]:
    out = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if "(StrictConfig)" in path.read_text(encoding="utf-8"):
                out.append(".".join(path.relative_to(ROOT).with_suffix("").parts))
    return out


def test_config_modules_import_without_schema_warnings():
    mods = _config_modules()
    assert len(mods) >= 20, mods  # the scan found the project's configs
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, *mods], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
