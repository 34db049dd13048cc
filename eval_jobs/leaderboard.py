"""Leaderboard over OV-SGG-Bench runs with bootstrap intervals (issue 15, deliverable 5).

    python -m eval_jobs.leaderboard RUN_DIR [RUN_DIR ...] --out DIR [--k 50 --resamples 1000 --seed 0]

Reads each run's ``results.json`` and the ``per_image.parquet`` it names (``paper`` protocol
runs of ``eval_jobs.ovsgg``) and writes into ``--out``:

* ``leaderboard.md``: per benchmark cell, one row per (system, run) with R@K and mR@K and their
  percentile intervals over images; then the pairwise differences between the entries on the same
  benchmark and setting, paired on their shared image_ids, with interval, raw p, the
  Benjamini-Hochberg adjusted p over every test of the table, and significance at
  alpha = 1 - confidence after that correction;
* ``leaderboard.csv`` (the entries) and ``leaderboard_pairs.csv`` (the differences);
* where runs carry the bootstrap of eval_jobs.ovsgg (``bootstrap`` in results.json and its
  ``bootstrap_draws.parquet``): the OVS and each chance-corrected axis per (system, run) with
  their intervals, and their paired differences between every two entries whose draws are the same
  draws (same images per benchmark, seed and resamples; otherwise the pair is listed as not
  comparable draw for draw, with the reason), in ``leaderboard_composite.csv`` and
  ``leaderboard_composite_pairs.csv``; that table is its own family for the correction.

A leaderboard makes many comparisons at once, so some raw p below alpha are expected by chance
alone; the correction keeps the expected share of false "significant" marks at alpha. A p with
``<`` is a bound: no resample crossed zero (``relate.metrics.bootstrap.bootstrap_p_value``).

Intervals say how much R@K would move on another draw of images of the same kind: two systems
whose intervals overlap may still differ reliably, which is what the paired section tests.
"""

from __future__ import annotations

import argparse
import csv
import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pyarrow.parquet as pq
from pydantic import Field

from eval_jobs.report import format_pct
from relate.config import StrictConfig, dump_config
from relate.storage import Location, LocationValue
from relate.metrics.bootstrap import (CellRows, adjust_p_bh, align_cells, bootstrap_cell, bootstrap_p_value, cell_rows,
                                      format_p, paired_bootstrap)
from relate.metrics.resample import percentile_interval

__all__ = ["LeaderboardConfig", "LeaderboardResult", "main"]

_SETTING = ("axis", "mode", "matcher", "box_source")


class LeaderboardConfig(StrictConfig):
    runs: list[LocationValue] = Field(..., min_length=1, description="run folders of eval_jobs.ovsgg, each with results.json and per_image.parquet")
    out_dir: Location = Field("runs/leaderboard", description="folder for leaderboard.md, leaderboard.csv, leaderboard_pairs.csv and the resolved config")
    k: int = Field(50, gt=0, description="the K of R@K and mR@K (must be one of the runs' per-image Ks)")
    resamples: int = Field(1000, ge=1, description="bootstrap resamples of the images per cell and per pair")
    seed: int = Field(0, description="seed of the image resampling (the same draws for every cell of equal size)")
    confidence: float = Field(0.95, gt=0.0, lt=1.0, description="coverage of the percentile intervals; "
                              "1 - confidence is the false discovery rate of the significance marks")


@dataclass
class LeaderboardResult:
    entries: list[dict]
    pairs: list[dict]
    markdown: str
    out_dir: str
    composite: list[dict] | None = None
    composite_pairs: list[dict] | None = None


_QUANTITIES = ("ovs", "axis:A1", "axis:A2", "axis:A3", "axis:A4", "axis:A5", "axis:A6")


@dataclass
class _Composite:
    """One (system, run) of a bootstrapped run: point values, intervals and the raw draws."""

    system: str
    run: str
    points: dict[str, float | None]
    intervals: dict[str, tuple[float, float]]
    draws: dict[str, np.ndarray]
    key: tuple  # what must agree for two entries' draws to be the same draws

    @property
    def name(self) -> str:
        return f"{self.system} ({self.run})"


def _load_composites(run: Path, label: str) -> list[_Composite]:
    result = json.loads((run / "results.json").read_text())
    boot = result.get("bootstrap")
    if not boot:
        return []
    path = run / boot["draws"]
    if not path.is_file():
        raise FileNotFoundError(f"{path}: named by {run / 'results.json'} but missing")
    draws: dict[str, dict[str, np.ndarray]] = defaultdict(dict)
    for r in pq.read_table(path).to_pylist():
        draws[r["system"]][r["quantity"]] = np.asarray(r["draws"], dtype=np.float64)
    out = []
    for system, res in result["systems"].items():
        iv = boot["systems"].get(system, {})
        points: dict[str, float | None] = {"ovs": (res.get("composite") or {}).get("ovs")}
        ivs = {"ovs": iv.get("ovs")}
        for a, v in res["axes"].items():
            points[f"axis:{a}"] = v.get("norm")
            ivs[f"axis:{a}"] = iv.get("axes", {}).get(a)
        intervals = {q: (i["low"], i["high"]) for q, i in ivs.items() if i}
        key = (tuple(sorted(boot["images"].items())), boot["seed"], boot["resamples"])
        out.append(_Composite(system, label, points, intervals, draws.get(system, {}), key))
    return out


def _composite_entry(c: _Composite) -> dict:
    row: dict = {"system": c.system, "run": c.run}
    for q in _QUANTITIES:
        lo, hi = c.intervals.get(q, (float("nan"), float("nan")))
        row |= {q: c.points.get(q), f"{q}_low": lo, f"{q}_high": hi}
    return row


def _composite_pair(a: _Composite, b: _Composite, confidence: float) -> list[dict]:
    """Paired differences a - b on every quantity both have, or one row saying why there are none."""
    base = {"a": a.name, "b": b.name}
    if a.key != b.key:
        why = ("different images" if a.key[0] != b.key[0] else "different seed or resamples")
        return [{**base, "quantity": "*", "comparable": False, "reason": f"not the same draws: {why}", "d": None,
                 "d_low": None, "d_high": None, "p": None, "p_bound": None, "q": None, "significant": None}]
    out = []
    for q in _QUANTITIES:
        if q == "axis:A5" or q not in a.draws or q not in b.draws or a.points.get(q) is None or b.points.get(q) is None:
            continue
        d = a.draws[q] - b.draws[q]
        est = float(a.points[q]) - float(b.points[q])
        lo, hi = percentile_interval(d, confidence)
        p, bound = bootstrap_p_value(est, d)
        out.append({**base, "quantity": q, "comparable": True, "reason": "", "d": est, "d_low": lo, "d_high": hi,
                    "p": p, "p_bound": bound, "q": None, "significant": None})
    return out


def _mark_significance(rows: list[dict], keys: Sequence[tuple[str, str, str]], alpha: float) -> None:
    """Fill each (p key, q key, significant key) of ``rows`` in place: one Benjamini-Hochberg
    family over every p of every row, significant where the adjusted p is below ``alpha``."""
    cells = [(r, qk, sk, r[pk]) for r in rows for pk, qk, sk in keys if r.get(pk) is not None]
    q = adjust_p_bh([c[3] for c in cells])
    for (r, qk, sk, _), qv in zip(cells, q):
        r[qk], r[sk] = float(qv), bool(qv < alpha)


@dataclass
class _Cell:
    system: str
    run: str
    benchmark: str
    setting: tuple[str, ...]
    rows: CellRows
    source: str

    @property
    def name(self) -> str:
        return f"{self.system} ({self.run})"


def _load_run(run: Path, label: str, k: int) -> list[_Cell]:
    """The run's cells at K from the per-image file its results.json names."""
    res_path = run / "results.json"
    if not res_path.is_file():
        raise FileNotFoundError(f"{res_path}: no results.json (is {run} an eval_jobs.ovsgg run folder?)")
    result = json.loads(res_path.read_text())
    name = result.get("per_image")
    if not name:
        proto = result.get("protocol", {}).get("name", "?")
        raise ValueError(f"{res_path} names no per_image.parquet (protocol {proto!r}); the leaderboard needs "
                         "per-image rows, which only the 'paper' protocol writes")
    path = run / name
    if not path.is_file():
        raise FileNotFoundError(f"{path}: named by {res_path} but missing")
    groups: dict[tuple, list[dict]] = defaultdict(list)
    ks: set[int] = set()
    for r in pq.read_table(path).to_pylist():
        ks.add(int(r["k"]))
        groups[(r["system"], r["benchmark"], *(r[f] for f in _SETTING))].append(r)
    cells = [_Cell(key[0], label, key[1], tuple(key[2:]), cell_rows(rows, k), str(path))
             for key, rows in sorted(groups.items())]
    cells = [c for c in cells if c.rows.n_images > 0]
    if not cells:
        raise ValueError(f"{path} has no rows at K={k}; its Ks are {sorted(ks)}")
    return cells


def _labels(runs: Sequence[str]) -> list[str]:
    """Folder names, or the paths as given where two runs share a folder name."""
    names = [Path(r).name or r for r in runs]
    return names if len(set(names)) == len(names) else list(runs)


def _entry(c: _Cell, cfg: LeaderboardConfig) -> dict:
    b = bootstrap_cell(c.rows, cfg.resamples, cfg.seed, cfg.confidence)
    return {"benchmark": c.benchmark, **dict(zip(_SETTING, c.setting)), "system": c.system, "run": c.run,
            "n_images": b.n_images, "R": b.recall.estimate, "R_low": b.recall.low, "R_high": b.recall.high,
            "mR": b.mean_recall.estimate, "mR_low": b.mean_recall.low, "mR_high": b.mean_recall.high}


def _pair(a: _Cell, b: _Cell, cfg: LeaderboardConfig) -> dict:
    try:
        align_cells(a.rows, b.rows)
    except ValueError:
        raise ValueError(f"cells {a.name} and {b.name} on benchmark {a.benchmark!r} share no image_id "
                         f"({a.source}, {b.source}); they cannot be compared image by image") from None
    d = paired_bootstrap(a.rows, b.rows, cfg.resamples, cfg.seed, cfg.confidence)
    out = {"benchmark": a.benchmark, **dict(zip(_SETTING, a.setting)), "a": a.name, "b": b.name,
           "n_images": d.n_images}
    for tag, x in (("R", d.recall), ("mR", d.mean_recall)):
        out |= {f"d{tag}": x.estimate, f"d{tag}_low": x.low, f"d{tag}_high": x.high, f"p_{tag}": x.p_value,
                f"p_bound_{tag}": x.p_bound, f"q_{tag}": None, f"significant_{tag}": None}
    return out


_PAIR_TESTS = (("p_R", "q_R", "significant_R"), ("p_mR", "q_mR", "significant_mR"))


def _ci(lo: float, hi: float) -> str:
    return f"[{format_pct(lo)}, {format_pct(hi)}]"


def _markdown(entries: list[dict], pairs: list[dict], cfg: LeaderboardConfig) -> str:
    k, pc = cfg.k, f"{100 * cfg.confidence:g}%"
    lines = [f"# Leaderboard (K={k})", "",
             f"Percentile bootstrap over images: {cfg.resamples} resamples, seed {cfg.seed}, {pc} intervals; "
             "values in %.", ""]
    by_cell: dict[tuple, list[dict]] = defaultdict(list)
    for e in entries:
        by_cell[(e["benchmark"], *(e[f] for f in _SETTING))].append(e)
    for key, es in by_cell.items():
        lines += [f"## {key[0]} ({', '.join(key[1:])})", "",
                  f"| system | run | images | R@{k} | {pc} CI | mR@{k} | {pc} CI |", "|---|---|---:|---:|---|---:|---|"]
        lines += [f"| {e['system']} | {e['run']} | {e['n_images']} | {format_pct(e['R'])} | {_ci(e['R_low'], e['R_high'])} "
                  f"| {format_pct(e['mR'])} | {_ci(e['mR_low'], e['mR_high'])} |" for e in es]
        lines.append("")
    lines += ["## Pairwise differences", "",
              "A − B, paired on the images both hold. p: two-sided bootstrap p; q: Benjamini-Hochberg adjusted "
              f"over every p of this table; significant: q < {1 - cfg.confidence:g}.", ""]
    if not pairs:
        lines += ["No benchmark has two entries to compare.", ""]
        return "\n".join(lines)
    lines += [f"| benchmark | A | B | images | ΔR@{k} | {pc} CI | p | q | significant | ΔmR@{k} | {pc} CI | p | q | "
              "significant |", "|---|---|---|---:|---:|---|---:|---:|---|---:|---|---:|---:|---|"]
    for p in pairs:
        cols = [p["benchmark"], p["a"], p["b"], str(p["n_images"])]
        for t in ("R", "mR"):
            cols += [format_pct(p[f"d{t}"]), _ci(p[f"d{t}_low"], p[f"d{t}_high"]),
                     format_p(p[f"p_{t}"], p[f"p_bound_{t}"]), f"{p[f'q_{t}']:.3f}",
                     "yes" if p[f"significant_{t}"] else "no"]
        lines.append("| " + " | ".join(cols) + " |")
    return "\n".join(lines + [""])


def _write_csv(rows: list[dict], path: Path) -> None:
    with path.open("w", newline="") as f:
        if rows:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)


def _composite_markdown(entries: list[dict], pairs: list[dict], cfg: LeaderboardConfig) -> str:
    pc = f"{100 * cfg.confidence:g}%"
    cols = [q for q in _QUANTITIES if any(e.get(q) is not None for e in entries)]
    lines = ["## Composite and chance-corrected axes", "",
             f"From each run's own bootstrap (eval_jobs.ovsgg): {pc} intervals; A5 is held fixed.", "",
             "| system | run | " + " | ".join(q.replace("axis:", "") .upper() if q == "ovs" else q.replace("axis:", "")
                                           for q in cols) + " |",
             "|---|---|" + "---|" * len(cols)]
    for e in entries:
        vals = [f"{format_pct(e[q])} {_ci(e[f'{q}_low'], e[f'{q}_high'])}" if e.get(q) is not None else "—" for q in cols]
        lines.append(f"| {e['system']} | {e['run']} | " + " | ".join(vals) + " |")
    lines += ["", "### Paired differences (same draws)", "",
              "p: two-sided bootstrap p; q: Benjamini-Hochberg adjusted over every p of this table; "
              f"significant: q < {1 - cfg.confidence:g}.", ""]
    if not pairs:
        return "\n".join(lines + ["No two entries to compare.", ""])
    lines += [f"| A | B | quantity | A − B | {pc} CI | p | q | significant |", "|---|---|---|---:|---|---:|---:|---|"]
    for p in pairs:
        if not p["comparable"]:
            lines.append(f"| {p['a']} | {p['b']} | — | — | {p['reason']} | — | — | — |")
        else:
            lines.append(f"| {p['a']} | {p['b']} | {p['quantity']} | {format_pct(p['d'])} | "
                         f"{_ci(p['d_low'], p['d_high'])} | {format_p(p['p'], p['p_bound'])} | {p['q']:.3f} | "
                         f"{'yes' if p['significant'] else 'no'} |")
    return "\n".join(lines + [""])


def main(cfg: LeaderboardConfig) -> LeaderboardResult:
    """Bootstrap every cell of every run and every same-benchmark pair; write the tables."""
    cells = [c for run, label in zip(cfg.runs, _labels(cfg.runs)) for c in _load_run(Path(run), label, cfg.k)]
    entries = sorted((_entry(c, cfg) for c in cells),
                     key=lambda e: (e["benchmark"], *(e[f] for f in _SETTING), -e["R"], e["system"], e["run"]))
    by_cell: dict[tuple, list[_Cell]] = defaultdict(list)
    for c in cells:
        by_cell[(c.benchmark, *c.setting)].append(c)
    pairs = [_pair(a, b, cfg) for _, cs in sorted(by_cell.items())
             for i, a in enumerate(cs) for b in cs[i + 1:]]
    _mark_significance(pairs, _PAIR_TESTS, 1 - cfg.confidence)
    out = Path(cfg.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dump_config(cfg, out / "config.yaml")
    md = _markdown(entries, pairs, cfg)
    comps = [c for run, label in zip(cfg.runs, _labels(cfg.runs)) for c in _load_composites(Path(run), label)]
    c_entries = c_pairs = None
    if comps:
        c_entries = [_composite_entry(c) for c in comps]
        c_pairs = [row for i, a in enumerate(comps) for b in comps[i + 1:] for row in _composite_pair(a, b, cfg.confidence)]
        _mark_significance(c_pairs, (("p", "q", "significant"),), 1 - cfg.confidence)
        md += "\n" + _composite_markdown(c_entries, c_pairs, cfg)
        _write_csv(c_entries, out / "leaderboard_composite.csv")
        _write_csv(c_pairs, out / "leaderboard_composite_pairs.csv")
    (out / "leaderboard.md").write_text(md)
    _write_csv(entries, out / "leaderboard.csv")
    _write_csv(pairs, out / "leaderboard_pairs.csv")
    return LeaderboardResult(entries, pairs, md, str(out), c_entries, c_pairs)


def _parse(argv: Sequence[str] | None = None) -> LeaderboardConfig:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", metavar="RUN_DIR", help="eval_jobs.ovsgg run folders")
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--k", type=int, default=50)
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--confidence", type=float, default=0.95)
    a = ap.parse_args(argv)
    return LeaderboardConfig(runs=a.runs, out_dir=a.out, k=a.k, resamples=a.resamples, seed=a.seed,
                             confidence=a.confidence)


if __name__ == "__main__":
    print(main(_parse()).markdown)
