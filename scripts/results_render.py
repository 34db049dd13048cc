"""Result files (``docs/results/*.json``) rendered into the docs' tables and sentences.

Every figure the docs and the README state comes from a committed result file: a page marks
where a rendering goes, and the rendering is regenerated from the file, never typed in::

    <!-- results: NAME VIEW -->
    (generated: do not edit)
    <!-- /results -->

``NAME`` is the file ``docs/results/NAME.json`` (``log/NAME``: a file of the results log); ``VIEW`` is one of the views its kind offers. The
committed text between the markers is what GitHub shows; ``mkdocs build`` renders every block
again from the files (``scripts/docs_results.py``), and ``tests/unit/test_results_docs.py`` fails
when a committed block differs from its rendering or when a figure table stands outside a block.
After changing a result file: ``python -m scripts.results_render --write``.

Every file has ``kind``, ``title``, ``measured`` (the date, YYYY-MM-DD), ``command`` (what
reproduces it: a string, a list of lines, or a mapping of labelled commands, each a string or a
list of lines) and optional ``commit``, ``conditions`` (the machine and its load) and ``source``
(where the figures were taken from, when not from the command's own output file). Every kind
has the views ``command`` (all of it, a bash block) and ``command.KEY`` (one labelled command).
The kinds and their other views:

* ``benchmark``: what ``python -m benchmarks.NAME --out FILE`` writes (``benchmark``, ``figures``,
  ``env``) plus ``show``, the figures a page quotes, in order: ``{"figure", "label", "goal"?,
  "unit"?}`` (``goal`` like ``">= 20"``). Views: ``table`` (figure, value, goal, met) and
  ``sentence.KEY``, the template ``sentences[KEY]`` filled with the figures (``{figure:.1f}``
  formats as Python does) and with ``earlier``, figures of earlier runs a sentence compares with
  (``{earlier[name]}``; ``earlier_source`` says where they come from).
* ``learning``: per-family scores of a recipe trained on one or more sources (what
  ``train_jobs.learning_curve`` writes to ``curves.json``, kept for the final step). ``sources``:
  ``[{"name", "label", "seeds": [...], "gap_to"?: source name, "bar"?: true}]``; ``rows``: one per
  family (``family``, ``bar``?, ``note``?, and per source name ``{"mean", "lo"?, "hi"?, "per_seed"?,
  "gap"?, "gap_lo"?, "gap_hi"?, "stated"?}``; ``gap``: the gap to ``gap_to`` as the job computed it
  (with its paired interval when given), else the difference of the means; ``stated``: the share of the family's truth the source's training split states). Views: ``table`` (families as rows; per source ``mean [lo, hi]``, a gap to its
  ``gap_to`` source, the bar; bold where the bar source's ``lo`` reaches the bar), ``seeds``
  (each seed's value), ``stated`` (each source's ``stated`` share) and ``caption`` (from ``run``: ``recipe``, ``steps``, ``scenes``,
  ``eval_images``, ``minutes_per_seed`` [low, high]; then the date, commit and conditions).
* ``table``: a table recorded as measured (the results log): ``columns`` (the header cells),
  ``rows`` (lists of cells, strings or numbers) and optional ``align`` (the alignment cells,
  ``---:`` for right). Its ``command`` is optional. View: ``table``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "docs" / "results"
BLOCK = re.compile(r"<!-- results: (?P<name>[\w./-]+) (?P<view>[\w.]+) -->\n(?P<body>.*?)<!-- /results -->", re.S)
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_KINDS = {"benchmark", "learning", "table"}

__all__ = ["RESULTS", "BLOCK", "ResultError", "load_result", "render", "render_blocks", "pages", "main"]


class ResultError(ValueError):
    """A result file or a block that names one is malformed; the message names the file and field."""


def load_result(name: str, root: Path = RESULTS) -> dict[str, Any]:
    """``root/NAME.json``, its common fields checked."""
    path = root / f"{name}.json"
    if not path.is_file():
        raise ResultError(f"no result file {path.relative_to(REPO) if path.is_relative_to(REPO) else path}")
    doc = json.loads(path.read_text())
    for key in ("kind", "title", "measured") + (("command",) if doc.get("kind") != "table" else ()):
        if key not in doc:
            raise ResultError(f"{path.name}: missing {key!r}")
    if doc["kind"] not in _KINDS:
        raise ResultError(f"{path.name}: kind {doc['kind']!r}; valid: {sorted(_KINDS)}")
    if not _DATE.match(str(doc["measured"])):
        raise ResultError(f"{path.name}: measured {doc['measured']!r} is not a YYYY-MM-DD date")
    return doc


def _num(x: Any, digits: int = 3) -> str:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    if isinstance(x, int) or float(x).is_integer() and abs(x) >= 100:
        return f"{int(x):,}"
    return f"{x:.{digits}f}"


def _fig(x: Any) -> str:
    """A measured figure as the benchmark wrote it (its own rounding), thousands separated."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return str(x)
    if isinstance(x, int) or float(x).is_integer():
        return f"{int(x):,}"
    return f"{x:,}" if abs(x) >= 1000 else str(x)


def _gap(x: float) -> str:
    return "0.000" if round(x, 3) == 0 else f"{x:+.3f}"


def _table(header: list[str], rows: list[list[str]], align: list[str] | None = None) -> str:
    align = align or ["---"] * len(header)
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def _command(doc: dict, view: str, name: str) -> str:
    """``command``: every command of the file; ``command.KEY``: one of a file whose ``command`` is a
    mapping of labelled commands (each a string or a list of lines)."""
    cmd = doc["command"]
    if isinstance(cmd, dict):
        keys = [view.split(".", 1)[1]] if "." in view else list(cmd)
        missing = [k for k in keys if k not in cmd]
        if missing:
            raise ResultError(f"{name}.json: no command {missing[0]!r}; commands: {sorted(cmd)}")
        parts = [cmd[k] for k in keys]
    else:
        parts = [cmd]
    lines = [ln for part in parts for ln in (part if isinstance(part, list) else [part])]
    return "```bash\n" + "\n".join(lines) + "\n```"


def _goal_met(value: float, goal: str) -> str:
    m = re.fullmatch(r"(<=|>=|<|>)\s*([-\d.]+)", goal.replace(",", ""))
    if not m:
        return ""
    op, bound = m.group(1), float(m.group(2))
    ok = {"<=": value <= bound, ">=": value >= bound, "<": value < bound, ">": value > bound}[op]
    return "yes" if ok else "**no**"


def _benchmark(doc: dict, view: str, name: str) -> str:
    figures = doc.get("figures") or {}
    if view == "table":
        rows = []
        for item in doc.get("show") or []:
            fig = item["figure"]
            if fig not in figures:
                raise ResultError(f"{name}.json: show names {fig!r}, which figures lacks")
            value = figures[fig]
            unit = f" {item['unit']}" if item.get("unit") else ""
            goal = item.get("goal", "")
            rows.append([f"`{fig}`", item.get("label", ""), f"{_fig(value)}{unit}", goal,
                         _goal_met(value, goal) if goal else ""])
        table = _table(["figure", "what it is", "value", "goal", "met"], rows, ["---", "---", "---:", "---", "---"])
        return table + "\n\n" + _caption(doc)
    if view.startswith("sentence."):
        key = view.split(".", 1)[1]
        template = (doc.get("sentences") or {}).get(key)
        if template is None:
            raise ResultError(f"{name}.json: no sentence {key!r}")
        try:
            return template.format(**figures, earlier=doc.get("earlier") or {})
        except (KeyError, ValueError) as exc:
            raise ResultError(f"{name}.json: sentence {key!r}: {exc}") from None
    if view == "command" or view.startswith("command."):
        return _command(doc, view, name)
    raise ResultError(f"{name}.json: a benchmark has the views table, sentence.KEY and command[.KEY], not {view!r}")


def _caption(doc: dict) -> str:
    parts = [f"Measured {doc['measured']}"]
    if doc.get("commit"):
        parts.append(f"at `{doc['commit']}`")
    text = " ".join(parts)
    for key in ("conditions", "source"):
        if doc.get(key):
            text += f"; {doc[key]}"
    if doc.get("earlier_source"):
        text += f"; the earlier figures the sentences quote: {doc['earlier_source']}"
    return f"*{text}.*"


def _cell(row: dict, source: dict, bar_source: str | None) -> str:
    v = row.get(source["name"])
    if v is None:
        return ""
    text = _num(v["mean"])
    if source["name"] == bar_source and v.get("lo") is not None and row.get("bar") is not None and v["lo"] >= row["bar"]:
        text = f"**{text}**"
    if v.get("lo") is not None and v.get("hi") is not None:
        text += f" [{_num(v['lo'])}, {_num(v['hi'])}]"
    ref = row.get(source.get("gap_to") or "")
    if ref is not None and source.get("gap_to"):
        gap = _gap(v['gap'] if v.get('gap') is not None else v['mean'] - ref['mean'])
        if v.get("gap_lo") is not None and v.get("gap_hi") is not None:
            gap += f" [{_gap(v['gap_lo'])}, {_gap(v['gap_hi'])}]"
        text += f" ({gap})"
    return text


def _learning(doc: dict, view: str, name: str) -> str:
    sources, rows = doc["sources"], doc["rows"]
    bar_source = next((s["name"] for s in sources if s.get("bar")), None)
    if view == "table":
        header = ["family"] + [s["label"] for s in sources] + ["bar"]
        notes = any(r.get("note") for r in rows)
        header += ["what limits it (measured)"] if notes else []
        body = [[r["family"]] + [_cell(r, s, bar_source) for s in sources] + [_num(r["bar"], 2) if r.get("bar") is not None else ""]
                + ([r.get("note", "")] if notes else []) for r in rows]
        return _table(header, body, ["---"] + ["---:"] * (len(sources) + 1) + (["---"] if notes else []))
    if view == "seeds":
        header = ["family"] + [f"{s['label']}: seeds {', '.join(map(str, s['seeds']))}" for s in sources]
        body = [[r["family"]] + [", ".join(_num(x) for x in (r.get(s["name"]) or {}).get("per_seed", []))
                                 for s in sources] for r in rows]
        return _table(header, body, ["---"] + ["---:"] * len(sources))
    if view == "stated":
        stated = [s for s in sources if any("stated" in (r.get(s["name"]) or {}) for r in rows)]
        body = [[r["family"]] + [_num(r[s["name"]]["stated"]) if "stated" in (r.get(s["name"]) or {}) else ""
                                 for s in stated] for r in rows if any("stated" in (r.get(s["name"]) or {}) for s in stated)]
        return _table(["family"] + [f"truth stated by {s['label'].split(',')[0]}" for s in stated], body,
                      ["---"] + ["---:"] * len(stated))
    if view == "caption":
        run = doc.get("run") or {}
        bits = [f"`{run['recipe']}`" if run.get("recipe") else None,
                f"{run['steps']:,} steps" if run.get("steps") else None,
                f"{run['scenes']:,}-scene world" if run.get("scenes") else None,
                f"scored on {run['eval_images']} test images" if run.get("eval_images") else None,
                (f"{run['minutes_per_seed'][0]}-{run['minutes_per_seed'][1]} minutes a seed on 2 cores"
                 if run.get("minutes_per_seed") else None)]
        text = "; ".join(b for b in bits if b)
        return f"{text}. " + _caption(doc) if text else _caption(doc)
    if view == "command" or view.startswith("command."):
        return _command(doc, view, name)
    raise ResultError(f"{name}.json: a learning result has the views table, seeds, stated, caption and command[.KEY], "
                      f"not {view!r}")


def _plain_table(doc: dict, view: str, name: str) -> str:
    if view == "table":
        cols = doc["columns"]
        for i, row in enumerate(doc["rows"]):
            if len(row) != len(cols):
                raise ResultError(f"{name}.json: row {i} has {len(row)} cells for {len(cols)} columns")
        align = doc.get("align") or ["---"] + ["---:" if all(isinstance(r[j], (int, float)) for r in doc["rows"])
                                              else "---" for j in range(1, len(cols))]
        return _table(cols, [[_num(c) if isinstance(c, float) else c for c in row] for row in doc["rows"]], align) \
            + "\n\n" + _caption(doc)
    if (view == "command" or view.startswith("command.")) and "command" in doc:
        return _command(doc, view, name)
    raise ResultError(f"{name}.json: a table has the views table and command[.KEY], not {view!r}")


def render(name: str, view: str, root: Path = RESULTS) -> str:
    """The markdown of ``view`` of ``root/NAME.json``."""
    doc = load_result(name, root)
    kind = {"benchmark": _benchmark, "learning": _learning, "table": _plain_table}[doc["kind"]]
    return kind(doc, view, name).rstrip("\n")


def render_blocks(text: str, root: Path = RESULTS) -> str:
    """``text`` with every results block's body replaced by its rendering."""
    def one(m: re.Match) -> str:
        body = render(m.group("name"), m.group("view"), root)
        return f"<!-- results: {m.group('name')} {m.group('view')} -->\n{body}\n<!-- /results -->"

    return BLOCK.sub(one, text)


def pages() -> list[Path]:
    """The README and every docs page."""
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Render the results blocks of the README and docs pages from "
                                             "docs/results/*.json.")
    ap.add_argument("--write", action="store_true", help="rewrite the blocks in place (else: list stale pages)")
    args = ap.parse_args(argv)
    stale = []
    for page in pages():
        text = page.read_text()
        try:
            new = render_blocks(text)
        except ResultError as exc:
            print(f"{page.relative_to(REPO)}: error: {exc}", file=sys.stderr)
            return 1
        if new != text:
            stale.append(page)
            if args.write:
                page.write_text(new)
    for page in stale:
        print(f"{'rewrote' if args.write else 'stale'}: {page.relative_to(REPO)}")
    return 1 if stale and not args.write else 0


if __name__ == "__main__":
    sys.exit(main())
