"""cluster/grafana/relate_serve.json: every PromQL expression names only metrics that exist.

Our names come from ``serve_apps.metrics.SPECS`` with the exact series Prometheus scrapes
(``ray_`` prefix; ``_total`` for counters, ``_bucket``/``_sum``/``_count`` for histograms); Ray
Serve's names are read from the installed Ray (its Serve source and the Grafana panels it ships),
so a renamed or misspelt metric fails here instead of drawing an empty panel."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
from functools import cache
from pathlib import Path

import pytest

from serve_apps.metrics import SPECS

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "cluster" / "grafana" / "relate_serve.json"
RAY = Path(importlib.util.find_spec("ray").submodule_search_locations[0])
_SUFFIXES = ("_total", "_bucket", "_sum", "_count")


def _panels() -> list[dict]:
    out = []
    for p in json.loads(DASHBOARD.read_text())["panels"]:
        out += [p] + p.get("panels", [])
    return [p for p in out if p["type"] != "row"]


def _metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression (string literals, i.e. label values, removed first)."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    return set(re.findall(r"\b(ray_[a-z0-9_]+)\b", expr))


def _selectors(expr: str) -> set[str]:
    """Every identifier used as a vector selector (followed by '{'), whatever its prefix."""
    return set(re.findall(r"([A-Za-z_:][\w:]*)\s*\{", re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)))


def _ours() -> set[str]:
    return {name for spec in SPECS for name in spec.exported()}


@cache
def _ray_known() -> set[str]:
    """Ray Serve metric names: full series names in Ray's own dashboards, plus the base names
    Serve's source registers (f-string protocol names expanded)."""
    names: set[str] = set()
    for f in (RAY / "dashboard" / "modules" / "metrics" / "dashboards").glob("*.py"):
        names |= set(re.findall(r"\b(ray_serve_[a-z0-9_]+)\b", f.read_text()))
    for f in (RAY / "serve").rglob("*.py"):
        for base in re.findall(r"""f?["'](serve_[a-z0-9_{}]+)["']""", f.read_text()):
            for proto in ("http", "grpc"):
                names.add("ray_" + base.replace("{protocol_name}", proto))
    return names


def _check(name: str) -> str | None:
    """Why ``name`` is not a known series, or None when it is."""
    if name.startswith("ray_relate_"):
        return None if name in _ours() else f"{name}: not a series of serve_apps.metrics ({sorted(_ours())})"
    if name in _ray_known():
        return None
    base = next((name[: -len(s)] for s in _SUFFIXES if name.endswith(s)), name)
    return None if base in _ray_known() else f"{name}: not a Ray Serve metric in the installed ray"


def test_every_expression_names_existing_metrics():
    problems, seen = [], set()
    for panel in _panels():
        assert panel["targets"], f"panel {panel['title']!r} has no query"
        for t in panel["targets"]:
            names = _metric_names(t["expr"])
            assert names, f"{panel['title']!r}: no metric in {t['expr']!r}"
            assert _selectors(t["expr"]) <= names, f"{panel['title']!r}: non-ray selector in {t['expr']!r}"
            problems += [p for p in map(_check, sorted(names)) if p]
            seen |= names
    assert not problems, problems
    assert {s for s in seen if s.startswith("ray_serve_")}, "no Ray Serve panels"
    # Ray exports a histogram's _sum from bucket midpoints: our panels read buckets, counts and counters
    assert not {s for s in seen if s.startswith("ray_relate_") and s.endswith("_sum")}


def test_the_checker_catches_misspelt_and_unsuffixed_names():
    assert _check("ray_relate_requests_total") is None and _check("ray_serve_num_http_requests_total") is None
    assert _check("ray_serve_replica_processing_queries") is None
    assert _check("ray_relate_requests") is not None  # a counter is scraped as _total
    assert _check("ray_relate_request_latency_seconds_total") is not None  # a histogram has no _total
    assert _check("ray_relate_requets_total") is not None
    assert _check("ray_serve_num_http_reqs_total") is not None
    assert _metric_names('sum(rate(ray_relate_requests_total{route="ray_fake"}[5m]))') == {"ray_relate_requests_total"}


def test_every_custom_metric_has_a_panel_and_the_required_panels_exist():
    exprs = " ".join(t["expr"] for p in _panels() for t in p["targets"])
    for spec in SPECS:
        assert any(name in exprs for name in spec.exported()), f"{spec.name} is on no panel"
    titles = " | ".join(p["title"].lower() for p in _panels())
    for want in ("request rate by route and status", "p50 / p95 / p99 by route", "in flight", "queue depth",
                 "batch size", "cache hit ratio", "predicate scores"):
        assert want in titles, f"no panel {want!r} in {titles}"
    ids = [p["id"] for p in json.loads(DASHBOARD.read_text())["panels"]]
    assert len(ids) == len(set(ids))
    for p in _panels():
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_metric_specs_are_prefixed_and_declared_once(spec):
    assert re.fullmatch(r"relate_[a-z0-9_]+", spec.name)
    assert not spec.name.endswith(_SUFFIXES), "Ray adds the Prometheus suffixes itself"
    assert (spec.kind == "histogram") == bool(spec.boundaries)
    assert all(b > 0 for b in spec.boundaries) and list(spec.boundaries) == sorted(set(spec.boundaries))
    assert [s.name for s in SPECS].count(spec.name) == 1


def test_instruments_are_created_only_in_serve_apps_metrics():
    """One home: no other serve_apps module constructs a Ray metric or names a relate_ metric."""
    for f in (REPO / "serve_apps").rglob("*.py"):
        if f.name == "metrics.py" and f.parent.name == "serve_apps":
            continue
        tree = ast.parse(f.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                fn = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                assert fn not in ("Counter", "Gauge", "Histogram"), f"{f}: constructs a metric ({fn})"
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                assert not re.fullmatch(r"relate_[a-z0-9_]+", node.value), f"{f}: metric name {node.value!r}"
