"""mkdocs-gen-files script: every results block of every page rendered again from its result file.

A page marks a table or a sentence with ``<!-- results: NAME VIEW -->`` ... ``<!-- /results -->``
(``scripts/results_render.py`` documents the result files and their views). Whatever text the
committed page holds between the markers, the built site shows the rendering of
``docs/results/NAME.json``, so a figure on the site cannot differ from its result file.
"""

from __future__ import annotations

import sys
from pathlib import Path

import mkdocs_gen_files

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from scripts.results_render import BLOCK, render_blocks  # noqa: E402


def main() -> None:
    docs = REPO / "docs"
    for page in sorted(docs.rglob("*.md")):
        text = page.read_text()
        if BLOCK.search(text):
            name = page.relative_to(docs).as_posix()
            with mkdocs_gen_files.open(name, "w") as fh:
                fh.write(render_blocks(text))
            mkdocs_gen_files.set_edit_path(name, name)


main()
