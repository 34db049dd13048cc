"""The documentation site builds in strict mode, and its generated pages follow the code.

One ``mkdocs build --strict`` per session (about a minute on 2 busy cores, ~12 s of CPU): any
warning (a broken link or anchor, a page missing from the navigation, a griffe docstring warning)
fails it. The generated pages are then checked against the code they come from: every Arrow
schema of ``relate.schema`` on the formats page, every route of the Serve app on the HTTP API
page and in the saved ``openapi.json``, every public module in the API reference, every
benchmark on the performance page.
"""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pyarrow as pa
import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow
# the Material theme and one plugin print banners about MkDocs 2 that are not build warnings
QUIET = {"NO_MKDOCS_2_WARNING": "1", "DISABLE_MKDOCS_2_WARNING": "true", "HF_HUB_OFFLINE": "1"}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("docs") / "site"
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                          cwd=REPO, env={**os.environ, **QUIET}, capture_output=True, text=True, timeout=540)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{log[-6000:]}"
    warned = [line for line in log.splitlines() if re.search(r"\bWARNING\b|\bERROR\b", line)]
    assert not warned, "mkdocs build printed warnings:\n" + "\n".join(warned)
    return out


def _text(page: Path) -> str:
    """The visible text of a built page's article, whitespace collapsed."""
    raw = page.read_text()
    body = raw[raw.find("<article"):raw.find("</article>")]
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", body)).split())


def test_formats_page_names_every_schema(site: Path) -> None:
    import relate.schema

    schemas = [k for k, v in vars(relate.schema).items() if isinstance(v, pa.Schema) and not k.startswith("_")]
    assert schemas, "relate.schema defines no Arrow schema?"
    text = _text(site / "formats" / "index.html")
    missing = [s for s in schemas if s not in text]
    assert not missing, f"the formats page lacks {missing}"
    for name in schemas:  # every column of every schema, as the page writes it
        for field in getattr(relate.schema, name):
            assert field.name in text, f"{name}.{field.name} is not on the formats page"


def _routes(routes) -> list:
    for route in routes:
        if hasattr(route, "path"):
            yield route
        else:
            yield from _routes(getattr(getattr(route, "original_router", None) or getattr(route, "app", None),
                                       "routes", []))


def test_http_api_page_names_every_route(site: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from serve_apps.app import api

    paths = sorted({r.path for r in _routes(api.routes)})
    assert "/v1/relations" in paths, paths
    text = _text(site / "http-api" / "index.html")
    missing = [p for p in paths if p not in text]
    assert not missing, f"the HTTP API page lacks routes {missing}"
    saved = json.loads((site / "openapi.json").read_text())
    assert saved == json.loads(json.dumps(api.openapi())), "the site's openapi.json differs from api.openapi()"
    for name in saved.get("components", {}).get("schemas", {}):
        assert name in text, f"schema {name} is not on the HTTP API page"


def test_reference_has_a_page_per_public_module(site: Path) -> None:
    """Found on disk independently of scripts/docs_reference.py: every public module of every
    top-level package the project ships has its page, whatever modules move meanwhile."""
    import tomllib

    include = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = sorted({p.rstrip("*").rstrip(".") for p in include})
    missing = []
    for package in packages:
        for path in (REPO / package).rglob("*.py"):
            parts = path.relative_to(REPO).with_suffix("").parts
            if parts[-1] == "__main__" or any(p.startswith("_") and p != "__init__" for p in parts):
                continue
            if not all((REPO.joinpath(*parts[:i]) / "__init__.py").is_file() for i in range(1, len(parts))):
                continue
            mod = parts[:-1] if parts[-1] == "__init__" else parts
            page = site / "reference" / Path(*mod) / "index.html"
            if not page.is_file() or ".".join(mod) not in _text(page):
                missing.append(".".join(mod))
    assert not missing, f"modules without a reference page: {sorted(missing)}"
    text = _text(site / "reference" / "relate" / "schema" / "index.html")
    assert "validate_corpus" in text, "the reference page of relate.schema lacks its functions"


def test_performance_page_names_every_benchmark(site: Path) -> None:
    names = sorted(p.stem for p in (REPO / "benchmarks").glob("*.py") if not p.stem.startswith("_"))
    text = _text(site / "performance" / "index.html")
    missing = [n for n in names if f"python -m benchmarks.{n}" not in text]
    assert not missing, f"benchmarks without a command on the performance page: {missing}"


def test_cluster_page_includes_the_cluster_readme(site: Path) -> None:
    first = (REPO / "cluster" / "README.md").read_text().splitlines()[0].lstrip("# ").strip()
    assert first in _text(site / "cluster" / "index.html")


def test_results_blocks_are_rendered_from_their_files(site: Path) -> None:
    """Each page's figure sentences and tables are on the built site as docs/results/*.json renders
    them (scripts/docs_results.py), and the results log is a page of its own."""
    from scripts.results_render import BLOCK, render

    def plain(text: str) -> str:  # markdown or a page's text, compared without marks and spacing
        return re.sub(r"[`*\s]", "", text)

    checked = 0
    for md in sorted((REPO / "docs").rglob("*.md")):
        rel = md.relative_to(REPO / "docs").with_suffix("")
        page = site / (rel.parent if rel.name == "index" else rel) / "index.html"
        for m in BLOCK.finditer(md.read_text()):
            text = render(m.group("name"), m.group("view"))
            last = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("```")][-1]
            if m.group("view").startswith("sentence."):
                want = plain(text)
            elif last.startswith("|"):  # a table's last row, as its cells read on the page
                want = plain(" ".join(c.strip() for c in last.strip().strip("|").split("|") if c.strip()))
            else:
                want = plain(last)
            assert want in plain(_text(page)), f"{rel}: {m.group('name')} {m.group('view')} is not on the built page"
            checked += 1
    assert checked >= 20, checked
    assert "Results log" in _text(site / "results-log" / "index.html")
