"""The demo's stage capture (scripts/demo.py): everything a stage writes, from Python, C-level
writes and child processes, lands in the stage's log, and the terminal keeps only the demo's
own lines. Run in a child interpreter so the test owns its file descriptors 1 and 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_CHILD = """
import os, subprocess, sys, warnings
from pathlib import Path
sys.path.insert(0, {root!r})
from scripts.demo import captured, say
log = Path({log!r})
say("before")
with captured(log):
    print("python stdout")
    warnings.warn("a library warning")
    os.write(2, b"C-level stderr\\n")
    subprocess.run([sys.executable, "-c", "import sys; sys.stderr.write('child stderr\\\\n')"], check=True)
    say("demo line while captured")
print("after, on the terminal again")
try:
    with captured(log):
        raise RuntimeError("stage failed")
except RuntimeError:
    print("descriptors restored after a failure")
"""


def test_stage_output_goes_to_the_log_and_the_terminal_keeps_the_demo_lines(tmp_path):
    log = tmp_path / "logs" / "stage.log"
    proc = subprocess.run([sys.executable, "-c", _CHILD.format(root=str(ROOT), log=str(log))], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["before", "demo line while captured", "after, on the terminal again",
                                        "descriptors restored after a failure"]
    assert proc.stderr == ""
    text = log.read_text()
    for line in ("python stdout", "a library warning", "C-level stderr", "child stderr"):
        assert line in text
    assert "demo line" not in text
