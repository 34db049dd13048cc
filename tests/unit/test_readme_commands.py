"""Every command in the README's shell blocks works as written, and everything it names exists.

Commands are taken from the README's ```bash blocks (continuation lines joined, comments
dropped) and checked by kind, from the repository root:

* ``make T``: the target exists in the Makefile (``make demo`` and ``make test`` cannot run
  inside a test);
* ``python -m M ...``: ``python -m M --help`` exits 0, and the files the command names exist;
* ``python -m scripts.submit_job --submit -- M ...``: runs as written without ``--submit`` (the
  helper's dry run validates the job's config here and prints the ``ray job submit`` line);
* ``ray job submit ... -- python -m M ...``: the runtime_env file exists, and the job command is
  checked as above;
* ``serve run FILE``: the Serve config exists, its applications' modules exist, ``serve run
  --help`` exits 0;
* ``relate SUB ...``: ``relate SUB --help`` exits 0.

A command of any other kind fails the test, so a new one needs a rule here. The prose is
scanned too: every repository path, ``python -m`` module, ``make`` target and relative link the
README names must exist.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
BIN = Path(sys.executable).parent
pytestmark = pytest.mark.slow
# repository folders whose files a command or a sentence can name; run outputs (runs/...) are not checked
REPO_PATH = re.compile(r"(?<![\w/.-])((?:relate|actors|pipelines|train_jobs|serve_apps|eval_jobs|benchmarks|scripts|"
                       r"cluster|tests|docs)/[\w./-]*\w\.(?:py|yaml|yml|json|sh|md|png|txt|toml))(?![\w/])")
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0"}


def readme_commands(text: str) -> list[list[str]]:
    """argv of every command in the README's bash/sh blocks."""
    commands = []
    for block in re.findall(r"^```(?:bash|sh|shell)\n(.*?)^```", text, flags=re.S | re.M):
        for line in block.replace("\\\n", " ").splitlines():
            argv = shlex.split(line, comments=True)
            if argv:
                commands.append(argv)
    return commands


def _module_exists(module: str) -> bool:
    base = REPO.joinpath(*module.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _makefile_targets() -> set[str]:
    return set(re.findall(r"^([\w.-]+):(?!=)", (REPO / "Makefile").read_text(), flags=re.M))


class Checks:
    """What the commands need: help runs, dry runs, files and targets, gathered then checked."""

    def __init__(self) -> None:
        self.runs: dict[tuple[str, ...], str] = {}
        self.problems: list[str] = []

    def file(self, path: str, why: str) -> None:
        problem = f"{why}: {path} does not exist"
        if not (REPO / path).exists() and problem not in self.problems:
            self.problems.append(problem)

    def python(self, argv: list[str], line: str) -> None:
        """argv after ``python``: ``-m MODULE args...``."""
        if len(argv) < 2 or argv[0] != "-m":
            self.problems.append(f"not a `python -m` command: {line}")
            return
        module, args = argv[1], argv[2:]
        if not _module_exists(module):
            self.problems.append(f"{line}: no module {module}")
            return
        for arg in args:
            for path in REPO_PATH.findall(arg):
                self.file(path, line)
        if "--config" in args:
            self.file(args[args.index("--config") + 1], line)
        if module == "scripts.submit_job":
            cut = args.index("--")
            dry = [a for a in args[:cut] if a != "--submit"] + args[cut:]
            self.runs[(sys.executable, "-m", module, *dry)] = line
            self.python(["-m", *args[cut + 1:]], line)
        else:
            self.runs[(sys.executable, "-m", module, "--help")] = line

    def command(self, argv: list[str]) -> None:
        line = shlex.join(argv)
        exe = Path(argv[0]).name
        if exe == "make":
            missing = set(argv[1:]) - _makefile_targets()
            if missing:
                self.problems.append(f"{line}: no Makefile target {sorted(missing)}")
        elif exe.startswith("python"):
            self.python(argv[1:], line)
        elif exe == "ray" and argv[1:3] == ["job", "submit"]:
            if "--runtime-env" in argv:
                self.file(argv[argv.index("--runtime-env") + 1], line)
            job = argv[argv.index("--") + 1:]
            self.command(job)
        elif exe == "serve" and len(argv) == 3 and argv[1] in ("run", "deploy"):
            self.file(argv[2], line)
            if (REPO / argv[2]).is_file():
                for app in yaml.safe_load((REPO / argv[2]).read_text()).get("applications", []):
                    module = app["import_path"].split(":")[0]
                    if not _module_exists(module):
                        self.problems.append(f"{line}: import_path module {module} does not exist")
            self.runs[(str(BIN / "serve"), argv[1], "--help")] = line
        elif exe == "relate" and len(argv) >= 2:
            self.runs[(str(BIN / "relate"), argv[1], "--help")] = line
        elif exe == "bash" and len(argv) >= 2:
            self.file(argv[1], line)
        elif exe == "export" and len(argv) >= 2 and all(re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", a) for a in argv[1:]):
            pass  # environment for the commands after it (e.g. RAY_AUTH_MODE=token for a token-mode cluster)
        else:
            self.problems.append(f"no rule to check this README command (add one to {Path(__file__).name}): {line}")


def test_readme_has_the_two_setup_commands_first() -> None:
    commands = readme_commands(README.read_text())
    assert commands[:2] == [["make", "demo"], ["make", "test"]], commands[:2]


def test_readme_commands_run() -> None:
    checks = Checks()
    commands = readme_commands(README.read_text())
    assert len(commands) >= 5, "the README lost its commands?"
    for argv in commands:
        checks.command(argv)
    assert not checks.problems, "\n".join(checks.problems)

    def run(argv: tuple[str, ...]) -> str | None:
        proc = subprocess.run(argv, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            return f"{shlex.join(argv)} (from: {checks.runs[argv]}) exited {proc.returncode}:\n{proc.stderr[-2000:]}"
        return None

    with ThreadPoolExecutor(max_workers=2) as pool:
        failed = [r for r in pool.map(run, sorted(checks.runs)) if r]
    assert not failed, "\n\n".join(failed)


def test_readme_names_only_things_that_exist() -> None:
    text = README.read_text()
    problems = [f"names {p}, which does not exist" for p in sorted(set(REPO_PATH.findall(text)))
                if not (REPO / p).exists()]
    modules = {m for m in re.findall(r"python -m ([\w.]+)", text)}
    problems += [f"runs `python -m {m}`, which does not exist" for m in sorted(modules) if not _module_exists(m)]
    targets = set(re.findall(r"`make ([\w.-]+)", text)) | set(re.findall(r"^make ([\w.-]+)", text, flags=re.M))
    problems += [f"names `make {t}`, which the Makefile lacks" for t in sorted(targets - _makefile_targets())]
    for link in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if not re.match(r"[a-z]+:", link) and not (REPO / link).exists():
            problems.append(f"links to {link}, which does not exist")
    assert not problems, "README: " + "; ".join(problems)
