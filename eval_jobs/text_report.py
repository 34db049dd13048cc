"""Table 16 report (seed 001, B.2): text-space geometry of one or more encoders or banks.

    python -m eval_jobs.text_report --set 'encoders=[minilm, student:runs/distill_text/student]'
    python -m eval_jobs.text_report --set split_file=runs/distill_text/split.json

Rows are built over the grouped base forms (or a vocabulary file); with ``split_file`` (the
``split.json`` a distillation run writes) each encoder gets one row for the trained and one
for the held-out inverse pairs; a group-level split (``heldout_groups`` in the file) also
restricts each row's synonym pairs to its own side's groups. Writes ``report.md`` and ``report.json`` into ``out_dir``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field

from relate.config import StrictConfig, dump_config, parse_job_args
from relate.predicate_knowledge import load_inverse_pairs, load_synonym_groups
from relate.storage import Location
from relate.text.bank import build_bank, load_bank
from relate.text.distill_data import base_strings
from relate.text.heldout import GroupSplit
from relate.text.report import geometry_report, render_markdown
from relate.text.vocabulary import load_vocabulary_file

__all__ = ["TextReportConfig", "TextReportResult", "main"]


class TextReportConfig(StrictConfig):
    encoders: list[str] = Field(default_factory=lambda: ["minilm"], description="encoder registry names, one row each")
    banks: list[str] = Field(default_factory=list, description="saved bank files, one row each (reported over their own strings)")
    vocabulary_file: str | None = Field(None, description="strings to embed (one per line); default: every grouped base form")
    split_file: str | None = Field(None, description="split.json from train_jobs.distill_text: report trained and held-out inverse pairs separately")
    out_dir: Location = Field("runs/text_report", description="folder for report.md, report.json and the resolved config")


@dataclass
class TextReportResult:
    rows: list
    markdown: str
    out_dir: str


def _pair_sets(cfg: TextReportConfig) -> dict[str, tuple[dict, list[tuple[str, str]]]]:
    """Split name -> (synonym groups, inverse pairs) the rows of that split read."""
    groups = load_synonym_groups()
    if cfg.split_file is None:
        return {"all": (groups, list(load_inverse_pairs()))}
    split = json.loads(Path(cfg.split_file).read_text())
    if "heldout_groups" in split:  # a group-level split: each side reads its own groups' synonyms too
        gs = GroupSplit(trained=tuple(map(tuple, split["trained_groups"])),
                        heldout=tuple(map(tuple, split["heldout_groups"])))
        return {"trained": (gs.synonym_groups("trained"), gs.inverse_pairs("trained")),
                "held-out": (gs.synonym_groups("heldout"), gs.inverse_pairs("heldout"))}
    return {"trained": (groups, [tuple(p) for p in split["inverse_train"]]),
            "held-out": (groups, [tuple(p) for p in split["inverse_heldout"]])}


def main(cfg: TextReportConfig) -> TextReportResult:
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dump_config(cfg, out / "config.yaml")
    strings = load_vocabulary_file(cfg.vocabulary_file) if cfg.vocabulary_file else base_strings()
    banks = [(name, build_bank(strings, name)) for name in cfg.encoders]
    banks += [(path, load_bank(path)) for path in cfg.banks]
    rows = []
    for label, bank in banks:
        for split, (groups, pairs) in _pair_sets(cfg).items():
            rows.append((f"{label} ({split} inverse pairs)", geometry_report(bank, groups, pairs)))
    markdown = render_markdown(rows)
    (out / "report.md").write_text(markdown + "\n")
    (out / "report.json").write_text(json.dumps([{"label": l, **r} for l, r in rows], indent=2))
    return TextReportResult(rows=rows, markdown=markdown, out_dir=str(out))


if __name__ == "__main__":
    print(main(parse_job_args(TextReportConfig, description=__doc__)).markdown)
