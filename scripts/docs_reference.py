"""mkdocs-gen-files script: one API reference page per public module, found by walking the packages.

The packages are the ones pyproject.toml ships (``[tool.setuptools.packages.find] include``), and
every module under them is found on disk at build time, so moving or adding a module needs no
edit here: the reference and its navigation (``reference/SUMMARY.md``, read by literate-nav)
always match the tree. Private modules (``_name.py``) and ``__main__`` shims are left out.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import mkdocs_gen_files

REPO = Path(__file__).resolve().parent.parent
OUT = Path("reference")


def shipped_packages(repo: Path = REPO) -> list[str]:
    """Top-level package names matching pyproject's setuptools include patterns."""
    find = tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    tops = {p.split("*")[0].rstrip(".") for p in find.get("include", [])}
    return sorted(t for t in tops if (repo / t / "__init__.py").is_file())


def public_modules(package: str, repo: Path = REPO) -> list[tuple[str, ...]]:
    """Dotted module paths (as tuples) under ``package``: packages first, every parent a package."""
    root = repo / package
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(repo).with_suffix("")
        parts = rel.parts
        if parts[-1] == "__main__" or any(p.startswith("_") and p != "__init__" for p in parts):
            continue
        if not all((repo.joinpath(*parts[:i]) / "__init__.py").is_file() for i in range(1, len(parts))):
            continue  # a folder without __init__.py (data, configs) is not importable as a package
        found.append(parts[:-1] if parts[-1] == "__init__" else parts)
    return sorted(set(found))


def _submodule_list(parts: tuple[str, ...], modules: list[tuple[str, ...]]) -> str:
    """Markdown links from a package's page to the pages of its direct children."""
    children = [m for m in modules if len(m) == len(parts) + 1 and m[:-1] == parts]
    if not children:
        return ""
    links = []
    for child in children:
        target = f"{child[-1]}/index.md" if (REPO.joinpath(*child) / "__init__.py").is_file() else f"{child[-1]}.md"
        links.append(f"[`{'.'.join(child)}`]({target})")
    return "Modules: " + ", ".join(links) + ".\n\n"


def main() -> None:
    nav = mkdocs_gen_files.Nav()
    for package in shipped_packages():
        modules = public_modules(package)
        for parts in modules:
            ident = ".".join(parts)
            is_package = (REPO.joinpath(*parts) / "__init__.py").is_file()
            doc = OUT.joinpath(*parts, "index.md") if is_package else OUT.joinpath(*parts).with_suffix(".md")
            nav[parts] = doc.relative_to(OUT).as_posix()
            with mkdocs_gen_files.open(doc, "w") as fh:
                fh.write(f"# `{ident}`\n\n")
                if is_package:
                    fh.write(_submodule_list(parts, modules))
                fh.write(f"::: {ident}\n")
            source = REPO.joinpath(*parts) / "__init__.py" if is_package else REPO.joinpath(*parts).with_suffix(".py")
            mkdocs_gen_files.set_edit_path(doc, source.relative_to(REPO))
    with mkdocs_gen_files.open(OUT / "SUMMARY.md", "w") as fh:
        fh.writelines(nav.build_literate_nav())


main()
