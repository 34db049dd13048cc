"""Probe reports: a markdown table in the layout of seed 000's Tables 5-6, a plain-text table for
terminals, and the Fig. 4-style scatter (ImageNet top-1 against probe accuracy)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from relate.probe.metrics import AxisScores
from relate.probe.uncertainty import Interval, PairedTest

__all__ = ["ModelRow", "format_markdown_table", "format_text_table", "format_paired_tests", "plot_scatter"]

PARADIGM_STYLE = {  # Fig. 4: colour by paradigm; marker also by paradigm here
    "supervised": ("tab:blue", "s"), "ssl": ("tab:green", "^"), "clip": ("tab:pink", "o"),
    "generative": ("tab:orange", "D"), "baseline": ("tab:gray", "x"), "text": ("tab:purple", "P"),
}


@dataclass(frozen=True)
class ModelRow:
    """Everything one table row needs."""

    name: str
    paradigm: str
    params_m: float | None
    imagenet_top1: float | None  # percent, supplied by the user (never computed here)
    scores: AxisScores
    intervals: dict[str, Interval] | None = None


def _pct(x: float) -> str:
    return "-" if x is None or math.isnan(x) else f"{100 * x:.2f}"


def _gap(x: float) -> str:
    return "-" if math.isnan(x) else f"{100 * x:+.2f}"


def _ci(iv: Interval | None) -> str:
    if iv is None or math.isnan(iv.low):
        return "-"
    return f"[{100 * iv.low:.1f}, {100 * iv.high:.1f}]"


def format_markdown_table(rows: Sequence[ModelRow], title: str) -> str:
    """Model, paradigm, params, ImageNet, overall (+95% CI), CR, TR, CD, SD, both gaps;
    accuracies in percent, gaps in percentage points."""
    head = ["Model", "Paradigm", "Params (M)", "IN top-1", "Overall", "95% CI", "CR", "TR",
            "CD", "SD", "Δ CR-TR", "Δ CD-SD"]
    lines = [f"### {title}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        s = r.scores
        ci = r.intervals.get("overall") if r.intervals else None
        cells = [r.name, r.paradigm, "-" if r.params_m is None else f"{r.params_m:.1f}",
                 "-" if r.imagenet_top1 is None else f"{r.imagenet_top1:.2f}",
                 _pct(s.overall), _ci(ci), _pct(s.CR), _pct(s.TR), _pct(s.CD), _pct(s.SD),
                 _gap(s.gap_cr_tr), _gap(s.gap_cd_sd)]
        lines.append("| " + " | ".join(cells) + " |")
    if rows:
        s = rows[0].scores
        lines += ["", f"{s.n} triplets (CR {s.n_CR}, TR {s.n_TR}; CD {s.n_CD}, SD {s.n_SD}); "
                      "accuracy in %, gaps in percentage points."]
    return "\n".join(lines) + "\n"


def format_text_table(rows: Sequence[ModelRow]) -> str:
    """A short fixed-width table for the terminal."""
    cols = ["model", "overall", "CR", "TR", "CD", "SD", "dCR-TR", "dCD-SD", "95% CI overall"]
    width = max([len(c) for c in ["model"]] + [len(r.name) for r in rows]) + 2
    out = [cols[0].ljust(width) + "".join(c.rjust(8) for c in cols[1:-1]) + "  " + cols[-1]]
    for r in rows:
        s = r.scores
        ci = r.intervals.get("overall") if r.intervals else None
        vals = [_pct(s.overall), _pct(s.CR), _pct(s.TR), _pct(s.CD), _pct(s.SD),
                _gap(s.gap_cr_tr), _gap(s.gap_cd_sd)]
        out.append(r.name.ljust(width) + "".join(v.rjust(8) for v in vals) + "  " + _ci(ci))
    return "\n".join(out)


def format_paired_tests(tests: Sequence[PairedTest]) -> str:
    """Markdown table of the pairwise comparisons."""
    lines = ["### Paired tests", "", "| A | B | acc A | acc B | Δ (pp) | A only | B only | McNemar p | permutation p |",
             "|---|---|---|---|---|---|---|---|---|"]
    for t in tests:
        lines.append(f"| {t.model_a} | {t.model_b} | {_pct(t.acc_a)} | {_pct(t.acc_b)} | {_gap(t.diff)} | "
                     f"{t.a_only} | {t.b_only} | {t.p_mcnemar:.3g} | {t.p_permutation:.3g} |")
    return "\n".join(lines) + "\n"


def plot_scatter(rows: Sequence[ModelRow], path: str | Path, title: str = "") -> Path | None:
    """Fig. 4 style: x = ImageNet top-1, y = probe accuracy, style by paradigm, marker area by
    parameter count. Rows without an ImageNet accuracy are left out; returns None if none has one."""
    pts = [r for r in rows if r.imagenet_top1 is not None]
    if not pts:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.5), dpi=120)
    seen: set[str] = set()
    for r in pts:
        colour, marker = PARADIGM_STYLE.get(r.paradigm, ("black", "o"))
        area = 20.0 + 0.6 * (r.params_m or 0.0)  # area grows linearly with parameters
        ax.scatter(r.imagenet_top1, 100 * r.scores.overall, s=area, c=colour, marker=marker,
                   alpha=0.75, label=None if r.paradigm in seen else r.paradigm,
                   edgecolors="black" if marker != "x" else None, linewidths=0.5)
        seen.add(r.paradigm)
        ax.annotate(r.name, (r.imagenet_top1, 100 * r.scores.overall), fontsize=6,
                    xytext=(3, 3), textcoords="offset points")
    ax.axhline(50.0, color="grey", lw=0.8, ls="--")  # chance for a two-way choice
    ax.set_xlabel("ImageNet top-1 (%)")
    ax.set_ylabel("probe accuracy (%)")
    ax.set_title(title or "ImageNet accuracy vs relatedness accuracy")
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out
