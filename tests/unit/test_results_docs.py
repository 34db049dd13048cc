"""Every figure table and figure sentence of the README and the docs comes from a result file.

The pages hold results blocks (``scripts/results_render.py``); these tests fail when a committed
block differs from the rendering of its file, when a block names a file or view that does not
exist, when a result file is used by no page, and when a table of measured figures stands outside
a block. ``python -m scripts.results_render --write`` brings the blocks back in line.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from scripts.results_render import BLOCK, RESULTS, ResultError, load_result, main, pages, render, render_blocks

REPO = Path(__file__).resolve().parents[2]
# a table cell that is only a measured figure: 0.994, **0.994** [0.991, 0.997], 614.5, 1,806 MB, 0.961 (-0.033)
FIGURE_CELL = re.compile(r"^\**[-+]?\d[\d,]*(\.\d+)?\**( ?(%|s|ms|MB|GB|KB|x|min))?( \[[^\]]+\])?( \([^)]*\))?$")


def _outside_blocks(text: str) -> str:
    return BLOCK.sub("", text)


def _figure_rows(text: str) -> list[str]:
    rows = []
    for line in text.splitlines():
        if line.startswith("|") and not re.fullmatch(r"\|[\s:|-]+\|", line.strip()):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if any(FIGURE_CELL.match(c) for c in cells[1:]):
                rows.append(line)
    return rows


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_committed_blocks_equal_their_rendering(page: Path) -> None:
    text = page.read_text()
    assert render_blocks(text) == text, (f"{page.relative_to(REPO)}: a results block differs from its result file; "
                                         "run python -m scripts.results_render --write")


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_no_figure_table_outside_a_results_block(page: Path) -> None:
    rows = _figure_rows(_outside_blocks(page.read_text()))
    assert not rows, (f"{page.relative_to(REPO)}: figures typed into a table, with no result file behind them "
                      "(put them in docs/results/*.json and a results block):\n" + "\n".join(rows[:5]))


def test_the_site_build_renders_the_blocks() -> None:
    import yaml

    plugins = yaml.safe_load((REPO / "mkdocs.yml").read_text())["plugins"]
    scripts = next(p["gen-files"]["scripts"] for p in plugins if isinstance(p, dict) and "gen-files" in p)
    assert "scripts/docs_results.py" in scripts


def test_every_result_file_is_shown_somewhere() -> None:
    used = {m.group("name") for page in pages() for m in BLOCK.finditer(page.read_text())}
    files = {p.relative_to(RESULTS).with_suffix("").as_posix() for p in RESULTS.rglob("*.json")}
    assert files, "no result files?"
    assert not files - used, f"result files no page shows: {sorted(files - used)}"
    assert not used - files, f"blocks naming no result file: {sorted(used - files)}"


def test_readme_speed_and_scale_sentences_are_the_performance_pages() -> None:
    """The README quotes the benchmarks through the same blocks the performance page renders."""
    def blocks(path: Path) -> set[tuple[str, str]]:
        return {(m.group("name"), m.group("view")) for m in BLOCK.finditer(path.read_text())
                if m.group("name").startswith("bench_")}

    readme, performance = blocks(REPO / "README.md"), blocks(REPO / "docs" / "performance.md")
    assert {("bench_evaluator", "sentence.readme"), ("bench_evaluator", "sentence.speedup"),
            ("bench_annotate_scale", "sentence.readme")} <= readme
    assert readme <= performance, f"README figures the performance page does not show: {readme - performance}"
    speed = render("bench_evaluator", "sentence.speedup")
    assert "CPU time per image" in speed and "_sgb_reference.py" in speed, speed
    scale = render("bench_annotate_scale", "sentence.readme")
    figures = load_result("bench_annotate_scale")["figures"]
    assert f"{figures['driver_rss_ratio_200k_over_2k']:.2f}x" in scale and "1.1" in scale, scale


def _write(root: Path, name: str, doc: dict) -> None:
    (root / f"{name}.json").write_text(json.dumps(doc))


BENCH = {"kind": "benchmark", "title": "t", "measured": "2026-01-02", "command": "python -m benchmarks.x",
         "figures": {"ratio": 1.25, "rate": 614.5}, "show": [{"figure": "ratio", "label": "a ratio", "goal": "<= 1.1"}],
         "sentences": {"s": "grows {ratio:.2f}x at {rate:.0f} images/s"}}


def test_a_block_follows_its_file(tmp_path: Path) -> None:
    _write(tmp_path, "b", BENCH)
    page = "x\n<!-- results: b sentence.s -->\nold text\n<!-- /results -->\n<!-- results: b table -->\n<!-- /results -->\n"
    out = render_blocks(page, tmp_path)
    assert "grows 1.25x at 614 images/s" in out and "old text" not in out
    assert "| `ratio` | a ratio | 1.25 | <= 1.1 | **no** |" in out
    assert render_blocks(out, tmp_path) == out  # rendering is stable
    _write(tmp_path, "b", {**BENCH, "figures": {"ratio": 1.05, "rate": 614.5}})
    changed = render_blocks(out, tmp_path)
    assert changed != out and "| 1.05 | <= 1.1 | yes |" in changed


def test_learning_table_shows_mean_interval_gap_and_bold_at_the_bar(tmp_path: Path) -> None:
    doc = {"kind": "learning", "title": "t", "measured": "2026-01-02", "command": {"a": "python -m x"},
           "sources": [{"name": "truth", "label": "(a)", "seeds": [0, 1, 2], "bar": True},
                       {"name": "annotated", "label": "(b)", "seeds": [0], "gap_to": "truth"}],
           "rows": [{"family": "depth", "bar": 0.85, "truth": {"mean": 0.861, "lo": 0.852, "hi": 0.870},
                     "annotated": {"mean": 0.829}},
                    {"family": "spatial", "bar": 0.95, "truth": {"mean": 0.96, "lo": 0.94, "hi": 0.98},
                     "annotated": {"mean": 0.961, "gap": 0.002}}]}
    _write(tmp_path, "l", doc)
    table = render("l", "table", tmp_path)
    assert "| depth | **0.861** [0.852, 0.870] | 0.829 (-0.032) | 0.85 |" in table
    assert "| spatial | 0.960 [0.940, 0.980] | 0.961 (+0.002) | 0.95 |" in table  # lo under the bar: not bold
    assert render("l", "command.a", tmp_path) == "```bash\npython -m x\n```"


@pytest.mark.parametrize("broken, message", [
    ({**BENCH, "measured": "yesterday"}, "YYYY-MM-DD"),
    ({k: v for k, v in BENCH.items() if k != "command"}, "missing 'command'"),
    ({**BENCH, "show": [{"figure": "absent"}]}, "figures lacks"),
])
def test_a_malformed_result_file_is_named(tmp_path: Path, broken: dict, message: str) -> None:
    _write(tmp_path, "b", broken)
    with pytest.raises(ResultError, match=message):
        render("b", "table", tmp_path)
    with pytest.raises(ResultError, match="no result file"):
        render("absent", "table", tmp_path)


def test_the_write_command_reports_stale_pages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _write(tmp_path, "b", BENCH)
    page = tmp_path / "page.md"
    page.write_text("<!-- results: b sentence.s -->\nstale\n<!-- /results -->\n")
    import scripts.results_render as rr

    monkeypatch.setattr(rr, "pages", lambda: [page])
    monkeypatch.setattr(rr, "render_blocks", lambda text: render_blocks(text, tmp_path))
    monkeypatch.setattr(rr, "REPO", tmp_path)
    assert main([]) == 1 and "stale" in page.read_text()
    assert main(["--write"]) == 0 and "grows 1.25x" in page.read_text()
    assert main([]) == 0
