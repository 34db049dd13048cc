"""mkdocs-gen-files script: the HTTP API page, rendered from the FastAPI app's own OpenAPI document.

``serve_apps.app.api.openapi()`` is called at build time and written beside the page as
``openapi.json``; the page lists every operation (parameters, request bodies, responses) and every
body schema with its fields' types, limits and descriptions. Routes the app serves outside the
OpenAPI document (the browser page's static files, the spec and its viewers) are listed from
the app's route table, so a new route shows up on the page without an edit here.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Iterable

import mkdocs_gen_files

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

PAGE = "http-api.md"
SPEC = "openapi.json"
_LIMITS = {"minLength": "min length", "maxLength": "max length", "minItems": "min items", "maxItems": "max items",
           "minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<", "pattern": "pattern"}


def _cell(text: Any) -> str:
    """Text safe inside a Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _anchor(name: str) -> str:
    return "schema-" + "".join(c if c.isalnum() else "-" for c in name.lower())


def _type(schema: dict) -> str:
    """A short Markdown rendering of a JSON schema's type, linking component references."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[`{name}`](#{_anchor(name)})"
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            return " or ".join(_type(s) for s in schema[key])
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    if "enum" in schema:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in schema["enum"])
    kind = schema.get("type", "any")
    if kind == "array":
        return f"array of {_type(schema.get('items', {}))}"
    if kind == "object" and "additionalProperties" in schema and isinstance(schema["additionalProperties"], dict):
        return f"object of {_type(schema['additionalProperties'])}"
    fmt = schema.get("format") or schema.get("contentMediaType")
    return f"`{kind}`" + (f" ({fmt})" if fmt else "")


def _limits(schema: dict) -> str:
    found = [f"{label} {schema[key]}" for key, label in _LIMITS.items() if key in schema]
    for sub in schema.get("anyOf", []):
        found += [f"{label} {sub[key]}" for key, label in _LIMITS.items() if key in sub]
    return ", ".join(found)


def _fields(schema: dict) -> list[str]:
    rows = ["| field | type | required | default | limits | description |", "|---|---|---|---|---|---|"]
    required = set(schema.get("required", []))
    for name, prop in schema.get("properties", {}).items():
        default = f"`{json.dumps(prop['default'])}`" if "default" in prop else ""
        rows.append(f"| `{name}` | {_type(prop)} | {'yes' if name in required else ''} | {_cell(default)} "
                    f"| {_cell(_limits(prop))} | {_cell(prop.get('description', ''))} |")
    return rows


def _operation(path: str, method: str, op: dict) -> list[str]:
    out = [f"### `{method.upper()} {path}`", ""]
    if op.get("summary"):
        out += [f"**{op['summary']}**", ""]
    if op.get("description"):
        out += [op["description"].strip(), ""]
    if op.get("security"):
        out += ["Authentication: bearer token (when the server is configured with one).", ""]
    params = op.get("parameters", [])
    if params:
        out += ["| parameter | in | type | required | description |", "|---|---|---|---|---|"]
        out += [f"| `{p['name']}` | {p['in']} | {_type(p.get('schema', {}))} | {'yes' if p.get('required') else ''} "
                f"| {_cell(p.get('description', ''))} |" for p in params]
        out.append("")
    body = op.get("requestBody")
    if body:
        out += ["Request body" + (" (required)" if body.get("required") else "") + ":", ""]
        out += [f"- `{ctype}`: {_type(c.get('schema', {}))}" for ctype, c in body.get("content", {}).items()]
        out.append("")
    out += ["| status | description | body |", "|---|---|---|"]
    for code, resp in op.get("responses", {}).items():
        bodies = ", ".join(f"`{ct}` {_type(c['schema'])}" if c.get("schema") else f"`{ct}`"
                           for ct, c in resp.get("content", {}).items())
        out.append(f"| {code} | {_cell(resp.get('description', ''))} | {bodies} |")
    return out + [""]


def _leaf_routes(routes: Iterable[Any]) -> Iterable[Any]:
    """Every route of an app, descending into included routers."""
    for route in routes:
        if hasattr(route, "path"):
            yield route
        else:
            inner = getattr(route, "original_router", None) or getattr(route, "app", None)
            yield from _leaf_routes(getattr(inner, "routes", []))


def render(api: Any) -> tuple[str, dict]:
    """(page Markdown, OpenAPI document) for a FastAPI app."""
    spec = api.openapi()
    info = spec.get("info", {})
    out = ["# HTTP API", "",
           f"*{info.get('title', '')}*, version {info.get('version', '')} (OpenAPI {spec.get('openapi', '')}). "
           f"This page is generated at build time from the FastAPI app `serve_apps.app.api`; the same "
           f"document is served by a running app at `/openapi.json` (with Swagger UI at `/docs`) and is "
           f"saved here as [`openapi.json`]({SPEC}).", ""]
    if info.get("description"):
        out += [info["description"].strip(), ""]
    schemes = spec.get("components", {}).get("securitySchemes", {})
    for name, scheme in schemes.items():
        out += [f"Security scheme `{name}`: {scheme.get('type', '')} {scheme.get('scheme', '')}"
                + (f": {scheme['description']}" if scheme.get("description") else "") + ".", ""]
    out += ["## Operations", ""]
    for path, methods in spec.get("paths", {}).items():
        for method, op in methods.items():
            out += _operation(path, method, op)
    in_spec = {(p, m.upper()) for p, ms in spec.get("paths", {}).items() for m in ms}
    extra = sorted({(r.path, ", ".join(sorted(getattr(r, "methods", None) or {"(any)"})))
                    for r in _leaf_routes(api.routes)
                    if not any((r.path, m) in in_spec for m in (getattr(r, "methods", None) or ()))})
    if extra:
        out += ["## Routes outside the OpenAPI document", "",
                "Served by the same app but left out of the spec (static files of the browser page, the "
                "spec itself and its viewers):", "", "| path | methods |", "|---|---|"]
        out += [f"| `{path}` | {methods} |" for path, methods in extra] + [""]
    out += ["## Schemas", ""]
    for name, schema in spec.get("components", {}).get("schemas", {}).items():
        out += [f"### `{name}` {{#{_anchor(name)}}}", ""]
        if schema.get("description"):
            out += [" ".join(schema["description"].split()), ""]
        if schema.get("properties"):
            out += _fields(schema) + [""]
        elif "type" in schema or "enum" in schema:
            out += [f"Type: {_type(schema)}", ""]
    return "\n".join(out), spec


def main() -> None:
    with warnings.catch_warnings():  # Ray Serve's own pydantic deprecations say nothing about this page
        warnings.simplefilter("ignore")
        from serve_apps.app import api

    page, spec = render(api)
    with mkdocs_gen_files.open(PAGE, "w") as fh:
        fh.write(page)
    with mkdocs_gen_files.open(SPEC, "w") as fh:
        json.dump(spec, fh, indent=2)
    mkdocs_gen_files.set_edit_path(PAGE, "serve_apps/schemas.py")


main()
