"""Report writers for OV-SGG-Bench results: the Table-3-style markdown (seed 001, Tab. 3 with
Tab. 21's leave-one-axis-out beneath it) and the radar plot of the six chance-corrected axes
(Fig. 1, right: centre is chance, rim is perfect, rings 0.25 apart)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from relate.metrics.bootstrap import format_p

__all__ = ["format_pct", "table_rows", "write_table", "write_radar"]

_AXIS_TITLE = {"A1": "A1 transfer", "A2": "A2 precision", "A3": "A3 open vocabulary", "A4": "A4 detector",
               "A5": "A5 graph quality", "A6": "A6 spatial"}


def format_pct(x: Any, digits: int = 1) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return f"{100 * float(x):.{digits}f}"


def _iv(x: Any, iv: dict | None) -> str:
    """A value with its bootstrap interval, ``45.2 [40.1, 50.3]`` (the value alone without one)."""
    if not iv or iv.get("low") is None or math.isnan(iv["low"]):
        return format_pct(x)
    return f"{format_pct(x)} [{format_pct(iv['low'])}, {format_pct(iv['high'])}]"


def _pair(a: Any, b: Any) -> str:
    return f"{format_pct(a)} ({format_pct(b)})"


# how a recall cell's boxes met the GT's (RecallResult.object_labels); predcls on GT boxes links by index
_LABELS = {"scored": "object labels scored", "agnostic": "label-agnostic"}


def _cell_text(cell: dict | None, k: int) -> tuple[str, str]:
    """(value text, note) for one system's cell."""
    if cell is None:
        return "—", ""
    ax = cell["axis"]
    if ax in ("A1", "A4"):
        m = cell["recall"]["metrics"]
        labels = _LABELS.get(cell["recall"].get("object_labels"), "")
        if ax == "A1":
            note = f"triplet mass {format_pct(cell['triplet_mass']['triple'], 0)}%" if "triplet_mass" in cell else ""
            return _pair(m[f"F1@{k}"], m[f"mR@{k}"]), "; ".join(x for x in (labels, note) if x)
        ceiling = f"pair-recall ceiling {format_pct(cell['pair_recall']['ceiling'])}"
        return _pair(m[f"wR@{k}"], m[f"mR@{k}"]), "; ".join(x for x in (labels, ceiling) if x)
    if ax == "A2":
        f = cell["federated"]
        return _pair(f["fAP"], f["fAP_rare"]), f"pair coverage {format_pct(f['pair_coverage'], 0)}%"
    if ax == "A3":
        m = cell["open_vocab"]["metrics"]
        return f"{format_pct(m[f'mR@{k}'])} ({m['MRR']:.2f})", f"median rank {m['median_rank']:.0f} / {m['vocabulary_size']:.0f}"
    s = cell["spatial"]
    return _pair(s["macro_auc"], s["pooled_auc"]), "chance 50.0"


_MEASURE = {"A1": "{b}, F1@{k} (mR@{k})", "A2": "{b}, mean fAP (rare-predicate fAP)", "A3": "{b}, mR@{k} (MRR)",
            "A4": "{b}, wR@{k} (mR@{k})", "A6": "{b}, macro AUC (pooled AUC)"}


def table_rows(result: dict, benchmarks: list[tuple[str, str]], k: int) -> list[list[str]]:
    """Rows of the axis table: one per (benchmark), then A5 and the composite block."""
    names = list(result["systems"])
    rows = []
    for bname, axis in benchmarks:
        vals, notes = [], []
        for n in names:
            v, note = _cell_text(result["systems"][n]["cells"].get(bname), k)
            vals.append(v)
            if note:
                notes.append(f"{n}: {note}" if len(names) > 1 else note)
        rows.append([_AXIS_TITLE[axis], _MEASURE[axis].format(b=bname, k=k), *vals, "; ".join(notes)])
    if any("A5" in result["systems"][n]["axes"] for n in names):
        rows.append([_AXIS_TITLE["A5"], "share of the annotation's bits (Eq. 4)",
                     *[format_pct(result["systems"][n]["axes"].get("A5", {}).get("raw")) for n in names], ""])
    comps = [result["systems"][n]["composite"] or {} for n in names]
    boot = (result.get("bootstrap") or {}).get("systems", {})
    rows.append(["OVS composite", "harmonic mean of the chance-corrected axes",
                 *[_iv(c.get("ovs"), boot.get(n, {}).get("ovs")) for n, c in zip(names, comps)],
                 "; ".join(f"{n}: {', '.join(c.get('axis_set', []))}" for n, c in zip(names, comps))])
    rows.append(["", "arithmetic mean", *[format_pct(c.get("arithmetic")) for c in comps], ""])
    rows.append(["", "weakest axis", *[f"{c.get('weakest_axis', '—')} ({format_pct(c.get('weakest_value'))})"
                                       for c in comps], ""])
    rows.append(["", "balance = OVS / arithmetic", *[f"{c['balance']:.2f}" if c else "—" for c in comps], ""])
    return rows


def _md(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def write_table(result: dict, cfg: Any, path: str | Path) -> str:
    """Table 3 (axes x systems), the chance-corrected vector, and Table 21 (leave-one-axis-out)."""
    names = list(result["systems"])
    k = result["protocol"]["headline_k"]
    benches = [(b.name, b.axis) for b in cfg.benchmarks]
    p = result["protocol"]
    bt = result.get("bootstrap") or {}
    boot = bt.get("systems", {})
    ci = (f" Brackets: {100 * bt['confidence']:g}% percentile intervals from {bt['resamples']} resamples of each "
          "benchmark's images (A5 held fixed)." if bt else "")
    parts = [f"# OV-SGG-Bench\n\nProtocol: {p.get('name', 'paper')}, {p['mode'].replace('_', '-')} recall, "
             f"{p['matcher'].replace('_', '-')} matcher, K = {k}; percentages. One evaluator scored every system.{ci}\n",
             _md(["axis", "measure", *names, "note"], table_rows(result, benches, k)), "",
             "## Chance-corrected axes\n",
             _md(["axis", *names], [[a, *[_iv(result["systems"][n]["axes"].get(a, {}).get("norm"),
                                              boot.get(n, {}).get("axes", {}).get(a)) for n in names]]
                                    for a in ("A1", "A2", "A3", "A4", "A5", "A6")]),
             "\nA3 is reported, not summed. OVS is comparable only between systems scored on the same axis set.\n"]
    loo = result.get("leave_one_axis_out") or []
    if loo:
        rows = []
        for r in loo:
            vals = [r.get(n) for n in names]
            ratio = (f"{vals[0] / vals[1]:.2f}x" if len(vals) == 2 and vals[1] and not math.isnan(vals[1]) else "")
            ivs = [boot.get(n, {}).get("ovs") if r["withheld"] == "none"
                   else boot.get(n, {}).get("leave_one_axis_out", {}).get(r["withheld"]) for n in names]
            rows.append([r["withheld"], *[_iv(v, i) for v, i in zip(vals, ivs)]] + ([ratio] if len(names) == 2 else []))
        parts += ["## Leave-one-axis-out\n",
                  _md(["axis withheld", *names] + (["ratio"] if len(names) == 2 else []), rows), ""]
    diffs = [d for d in bt.get("differences", []) if not d["quantity"].startswith("cell:")]
    if diffs:
        parts += ["## Paired differences\n",
                  "A − B on the same image draws; significant: the interval excludes 0.\n",
                  _md(["A", "B", "quantity", "A − B", "interval", "p", "significant"],
                      [[d["a"], d["b"], d["quantity"], format_pct(d["estimate"]),
                        f"[{format_pct(d['low'])}, {format_pct(d['high'])}]",
                        format_p(d["p_value"], d.get("p_bound", False)),
                        "yes" if d["significant"] else "no"] for d in diffs]), ""]
    text = "\n".join(parts)
    Path(path).write_text(text)
    return text


def write_radar(result: dict, path: str | Path) -> None:
    """Six chance-corrected axes per system; a missing axis is drawn at the centre and marked n/a."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    axes = ["A1", "A2", "A3", "A4", "A5", "A6"]
    ang = np.linspace(0, 2 * np.pi, len(axes), endpoint=False)
    fig = plt.figure(figsize=(5, 5))
    ax = fig.add_subplot(111, polar=True)
    missing = set()
    for name, r in result["systems"].items():
        v = []
        for a in axes:
            x = r["axes"].get(a, {}).get("norm")
            if x is None:
                missing.add(a)
            v.append(0.0 if x is None else float(x))
        ovs = (r.get("composite") or {}).get("ovs")
        ax.plot(np.r_[ang, ang[:1]], np.r_[v, v[:1]], label=f"{name} (OVS {format_pct(ovs)})")
        ax.fill(np.r_[ang, ang[:1]], np.r_[v, v[:1]], alpha=0.15)
    ax.set_xticks(ang)
    ax.set_xticklabels([f"{_AXIS_TITLE[a]}{' (n/a)' if a in missing else ''}" for a in axes], fontsize=8)
    ax.set_ylim(0, 1)
    ax.set_yticks([0.25, 0.5, 0.75, 1.0])
    ax.set_title("OV-SGG-Bench (centre = chance, rim = perfect)", fontsize=9)
    ax.legend(loc="lower right", bbox_to_anchor=(1.25, -0.12), fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
