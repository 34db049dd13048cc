"""Import layering of the project, read from the source with ``ast`` (nothing is imported).

Two rules (STYLE.md, item 15): no two files import each other, directly or around a loop, and the
core package ``relate`` never imports the app packages above it. An import inside a function or
under ``TYPE_CHECKING`` counts like any other: it hides a cycle, it does not remove it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORE = "relate"
UPPER = ("actors", "pipelines", "train_jobs", "eval_jobs", "serve_apps")


def project_packages(root: Path) -> list[str]:
    """Top-level folders holding an ``__init__.py`` (the tests are not part of the import graph)."""
    return sorted(p.parent.name for p in root.glob("*/__init__.py") if p.parent.name != "tests")


def module_files(root: Path, packages: list[str]) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file under ``packages``."""
    out = {}
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            if "__pycache__" in path.parts:
                continue
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def imported_names(path: Path, module: str) -> set[str]:
    """Every dotted name an import statement anywhere in ``path`` may load: ``import a.b`` gives
    ``a.b``; ``from a.b import c`` gives ``a.b`` and ``a.b.c`` (c may be a submodule); relative
    imports are resolved against ``module``'s package."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module or ""
            names.add(prefix)
            names.update(f"{prefix}.{alias.name}" for alias in node.names)
    return names


def import_graph(root: Path, packages: list[str]) -> dict[str, set[str]]:
    """Module -> the project modules it imports."""
    files = module_files(root, packages)
    graph = {}
    for module, path in files.items():
        # A module importing its own package (or a package above it) is not counted: a package's
        # __init__ re-exports its children, so that edge would make every re-export a cycle.
        graph[module] = {n for n in imported_names(path, module)
                         if n in files and n != module and not module.startswith(n + ".")}
    return graph


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    stack = [start]
    while stack:
        for nxt in graph.get(stack.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return seen


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of two or more modules, each sorted, in sorted order."""
    reach = {v: _reachable(graph, v) for v in graph}
    comps = {frozenset(u for u in reach[v] if v in reach.get(u, ())) for v in graph if v in reach[v]}
    return sorted(sorted(c) for c in comps if len(c) > 1)


def upward_imports(graph: dict[str, set[str]], core: str, upper: tuple[str, ...]) -> list[tuple[str, str]]:
    """(core module, upper module) for every import from the core into an upper package."""
    return sorted((m, n) for m, targets in graph.items() if m.split(".")[0] == core
                  for n in targets if n.split(".")[0] in upper)


# --------------------------------------------------------------------------- this project


@pytest.fixture(scope="module")
def project_graph() -> dict[str, set[str]]:
    packages = project_packages(ROOT)
    assert {CORE, *UPPER} <= set(packages), f"expected packages missing from {packages}"
    return import_graph(ROOT, packages)


def test_no_file_import_cycles(project_graph):
    found = cycles(project_graph)
    assert not found, ("file import cycles; put the part both sides need in a module both can import "
                       "(moving an import into a function does not count):\n"
                       + "\n".join("  " + " <-> ".join(c) for c in found))


def test_core_imports_no_app_package(project_graph):
    found = upward_imports(project_graph, CORE, UPPER)
    assert not found, (f"{CORE}/ imports the layers above it; move the shared part into {CORE}/ or the "
                       "caller up:\n" + "\n".join(f"  {m} -> {n}" for m, n in found))


# --------------------------------------------------------------------------- the reader itself


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


TINY = {
    "core/__init__.py": "from core.a import thing\n",  # a re-export: core.a -> core is not an edge
    "core/a.py": "from . import b\nthing = 1\n",
    "core/b.py": "def late():\n    from .a import thing\n    return thing\n",
    "core/sub/__init__.py": "from . import c\n",
    "core/sub/c.py": "from .. import a\nfrom core import b\n\n\ndef serve():\n    import app.web\n",
    "app/__init__.py": "",
    "app/web.py": "import core.a\nfrom core.sub.c import serve\n",
    "tests/__init__.py": "import core.a\n",
}


def test_reader_resolves_every_import_form(tmp_path):
    _write(tmp_path, TINY)
    assert project_packages(tmp_path) == ["app", "core"]
    assert import_graph(tmp_path, project_packages(tmp_path)) == {
        "core": {"core.a"},
        "core.a": {"core.b"},
        "core.b": {"core.a"},
        "core.sub": {"core.sub.c"},
        "core.sub.c": {"core.a", "core.b", "app.web"},
        "app": set(),
        "app.web": {"core.a", "core.sub.c"},
    }


def test_reader_reports_cycles_and_upward_imports(tmp_path):
    _write(tmp_path, TINY)
    graph = import_graph(tmp_path, project_packages(tmp_path))
    assert cycles(graph) == [["app.web", "core.sub.c"], ["core.a", "core.b"]]
    assert upward_imports(graph, "core", ("app",)) == [("core.sub.c", "app.web")]


def test_cycles_finds_long_loops_only():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"d"}, "f": set()}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
