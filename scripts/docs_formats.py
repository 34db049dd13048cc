"""mkdocs-gen-files script: the data formats page, generated from ``relate/schema.py`` itself.

Every ``pyarrow.Schema`` the module defines becomes a section with one row per column, nested
list and struct fields flattened to dotted paths (``boxes[].x1``), their Arrow types and
nullability, the comments written above them in the source, and the named struct types they
reuse. The module docstring, the allowed values of its string tuples (``PASSES``,
``GATE_OUTCOMES``) and its validators come from the module too, so the page cannot drift from the
code that writes and checks the files.
"""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path
from types import ModuleType

import mkdocs_gen_files
import pyarrow as pa

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

PAGE = "formats.md"


def schemas(module: ModuleType) -> dict[str, pa.Schema]:
    """Module-level ``pa.Schema`` objects in definition order."""
    return {k: v for k, v in vars(module).items() if isinstance(v, pa.Schema) and not k.startswith("_")}


def _named_types(module: ModuleType) -> dict[pa.DataType, str]:
    return {v: k for k, v in vars(module).items() if isinstance(v, pa.DataType) and not k.startswith("_")}


def _comments(source: str) -> dict[str, str]:
    """Comment lines directly above ``NAME = ...`` assignments and ``pa.field("name", ...)`` lines."""
    found: dict[str, str] = {}
    pending: list[str] = []
    for line in source.splitlines():
        text = line.strip()
        if text.startswith("#"):
            pending.append(text.lstrip("#").strip())
            continue
        m = re.match(r"([A-Z][A-Z0-9_]*)\s*=", text) or re.match(r'pa\.field\("(\w+)"', text)
        if m and pending:
            found.setdefault(m.group(1), " ".join(pending))
        inline = re.search(r'pa\.field\("(\w+)".*#\s*(.+)$', text)
        if inline:
            found.setdefault(inline.group(1), inline.group(2))
        pending = []
    return found


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _rows(field: pa.Field, prefix: str, named: dict, notes: dict, out: list[str], top: bool) -> None:
    path = prefix + field.name
    kind = field.type
    label = f"`{kind}`"
    inner = kind.value_type if pa.types.is_list(kind) or pa.types.is_large_list(kind) else None
    if kind in named:
        label = f"`{named[kind]}`"
    elif inner is not None and inner in named:
        label = f"list of `{named[inner]}`"
    elif inner is not None and pa.types.is_struct(inner):
        label = "list of struct"
    note = notes.get(field.name, "") if top else ""
    out.append(f"| `{path}` | {_cell(label)} | {'yes' if field.nullable else 'no'} | {_cell(note)} |")
    struct = kind if pa.types.is_struct(kind) else inner if inner is not None and pa.types.is_struct(inner) else None
    if struct is not None:
        sub = path + ("[]." if inner is not None else ".")
        for child in struct:
            _rows(child, sub, named, notes, out, top=False)


def _signature(func) -> str:
    """The signature as written in the source (string annotations unquoted)."""
    sig = inspect.signature(func)
    params = [p.replace(annotation=inspect.Parameter.empty) for p in sig.parameters.values()]
    text = []
    for raw, p in zip(sig.parameters.values(), params):
        item = str(p)
        if raw.annotation is not inspect.Parameter.empty:
            name, _, default = item.partition("=")
            item = f"{name}: {raw.annotation}" + (f" = {default}" if default else "")
        text.append(item)
    star = next((i for i, p in enumerate(params) if p.kind is p.KEYWORD_ONLY), None)
    if star is not None and not any(p.kind is p.VAR_POSITIONAL for p in params):
        text.insert(star, "*")
    ret = f" -> {sig.return_annotation}" if sig.return_annotation is not inspect.Signature.empty else ""
    return f"({', '.join(text)}){ret}"


def render(module: ModuleType) -> str:
    named = _named_types(module)
    notes = _comments(inspect.getsource(module))
    found = schemas(module)
    out = ["# Data formats", "",
           f"Every table the project reads or writes is Parquet, and one module owns every layout: "
           f"`{module.__name__}`. This page is generated from that module at build time "
           f"({len(found)} schemas).", "",
           "!!! note \"From the module's docstring\"", ""]
    out += ["    " + line if line.strip() else "" for line in inspect.cleandoc(module.__doc__ or "").splitlines()]
    out.append("")
    values = {k: v for k, v in vars(module).items()
              if isinstance(v, tuple) and v and all(isinstance(x, str) for x in v) and k.isupper()}
    if values:
        out += ["## Allowed values", "", "| constant | values |", "|---|---|"]
        out += [f"| `{k}` | {', '.join(f'`{x}`' for x in v)} |" for k, v in values.items()] + [""]
    for name, schema in found.items():
        out += [f"## `{name}`", ""]
        if notes.get(name):
            out += [notes[name], ""]
        out += ["| column | type | nullable | note |", "|---|---|---|---|"]
        for field in schema:
            _rows(field, "", named, notes, out, top=True)
        if schema.metadata:
            out += ["", "Schema metadata: " + ", ".join(f"`{k.decode()}`" for k in schema.metadata)]
        out.append("")
    types = {k: v for k, v in vars(module).items()
             if isinstance(v, pa.DataType) and pa.types.is_struct(v) and not k.startswith("_")}
    if types:
        out += ["## Struct types", "", "The element types the list columns above reuse.", ""]
        for name, kind in types.items():
            fields = ", ".join(f"`{f.name}` {f.type}" for f in kind)
            out += [f"- `{name}`: {fields}" + (f". {notes[name]}" if notes.get(name) else "")]
        out.append("")
    other = {k: v for k, v in vars(module).items()
             if k.isupper() and isinstance(v, (bytes, int)) and not isinstance(v, bool) and not k.startswith("_")}
    if other:
        out += ["## Constants", ""]
        out += [f"- `{k}` = `{v.decode() if isinstance(v, bytes) else v}`" + (f": {notes[k]}" if notes.get(k) else "")
                for k, v in other.items()]
        out.append("")
    checks = [(k, v) for k, v in vars(module).items()
              if inspect.isfunction(v) and v.__module__ == module.__name__ and not k.startswith("_")]
    if checks:
        out += ["## Functions", "", "Writers and readers call these to build and check tables:", ""]
        out += [f"- `{k}{_signature(v)}`: {(inspect.getdoc(v) or '').splitlines()[0] if v.__doc__ else ''}"
                for k, v in checks]
        out.append("")
    return "\n".join(out)


def main() -> None:
    import relate.schema

    with mkdocs_gen_files.open(PAGE, "w") as fh:
        fh.write(render(relate.schema))
    mkdocs_gen_files.set_edit_path(PAGE, "relate/schema.py")


main()
