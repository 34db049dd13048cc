"""Every command in the README's shell blocks names things that exist, and so does its prose.

These are the quick static checks; ``tests/ray/test_readme_run.py`` runs every command for real
after ``make demo``. Commands (``tests/_readme.py``) are checked by kind, from the repository root:

* ``make T``: the target exists in the Makefile;
* ``python -m M ...``: the module exists, and so do the repository files the command names
  (its ``--config`` included); ``python -c CODE`` is Python that compiles;
* ``python -m scripts.submit_job [--submit] -- M ...``: the job command after ``--`` as above;
* ``ray job submit ... -- python -m M ...``: the runtime_env file exists, the job as above;
* ``serve run FILE``: the Serve config exists and its applications' modules exist;
* ``relate SUB ...``: SUB is a subcommand of the ``relate`` console script.

A command of any other kind fails the test, so a new one needs a rule here (and in the run test).
The prose is scanned too: every repository path, ``python -m`` module, ``make`` target and
relative link the README names must exist.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml

from _readme import README, REPO, readme_commands

# repository folders whose files a command or a sentence can name; run outputs (runs/...) are not checked
REPO_PATH = re.compile(r"(?<![\w/.-])((?:relate|actors|pipelines|train_jobs|serve_apps|eval_jobs|benchmarks|scripts|"
                       r"cluster|tests|docs)/[\w./-]*\w\.(?:py|yaml|yml|json|sh|md|png|txt|toml))(?![\w/])")


def _module_exists(module: str) -> bool:
    base = REPO.joinpath(*module.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def _makefile_targets() -> set[str]:
    return set(re.findall(r"^([\w.-]+):(?!=)", (REPO / "Makefile").read_text(), flags=re.M))


class Checks:
    """Problems found in the README's commands, gathered then reported together."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def file(self, path: str, why: str) -> None:
        problem = f"{why}: {path} does not exist"
        if not (REPO / path).exists() and problem not in self.problems:
            self.problems.append(problem)

    def python(self, argv: list[str], line: str) -> None:
        """argv after ``python``: ``-m MODULE args...`` or ``-c CODE``."""
        if len(argv) == 2 and argv[0] == "-c":
            try:
                compile(argv[1], "<README>", "exec")
            except SyntaxError as exc:
                self.problems.append(f"{line}: not Python: {exc}")
            return
        if len(argv) < 2 or argv[0] != "-m":
            self.problems.append(f"not a `python -m` or `python -c` command: {line}")
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
            self.python(["-m", *args[args.index("--") + 1:]], line)

    def command(self, argv: list[str]) -> None:
        line = shlex.join(argv)
        exe = Path(argv[0]).name
        if exe == "make":
            missing = set(a for a in argv[1:] if "=" not in a) - _makefile_targets()
            if missing:
                self.problems.append(f"{line}: no Makefile target {sorted(missing)}")
        elif exe.startswith("python"):
            self.python(argv[1:], line)
        elif exe == "ray" and argv[1:3] == ["job", "submit"]:
            if "--runtime-env" in argv:
                self.file(argv[argv.index("--runtime-env") + 1], line)
            self.command(argv[argv.index("--") + 1:])
        elif exe == "serve" and len(argv) == 3 and argv[1] in ("run", "deploy"):
            self.file(argv[2], line)
            if (REPO / argv[2]).is_file():
                for app in yaml.safe_load((REPO / argv[2]).read_text()).get("applications", []):
                    module = app["import_path"].split(":")[0]
                    if not _module_exists(module):
                        self.problems.append(f"{line}: import_path module {module} does not exist")
        elif exe == "relate" and len(argv) >= 2:
            if argv[1] not in ("predict", "export"):
                self.problems.append(f"{line}: `relate` has no subcommand {argv[1]!r}")
        elif exe == "export" and len(argv) >= 2 and all(re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", a) for a in argv[1:]):
            pass  # environment for the commands after it (e.g. RAY_AUTH_MODE=token for a token-mode cluster)
        else:
            self.problems.append(f"no rule to check this README command (add one to {Path(__file__).name}): {line}")


def test_readme_has_the_two_setup_commands_first() -> None:
    commands = readme_commands()
    assert [c.argv for c in commands[:2]] == [["make", "demo"], ["make", "test"]], commands[:2]


def test_readme_commands_name_what_exists() -> None:
    checks = Checks()
    commands = readme_commands()
    assert len(commands) >= 5, "the README lost its commands?"
    for cmd in commands:
        checks.command(cmd.argv)
    assert not checks.problems, "\n".join(checks.problems)


def test_cluster_only_commands_are_dry_runnable() -> None:
    """A command the README marks cluster only runs here as its dry run: only the submit helper has one."""
    marked = [c for c in readme_commands() if c.cluster_only]
    assert marked, "the README marks no command cluster only (the released recipe is)"
    for cmd in marked:
        assert cmd.argv[1:3] == ["-m", "scripts.submit_job"], cmd.line


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
