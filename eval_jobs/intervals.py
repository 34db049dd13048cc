"""Bootstrap intervals over images for every OV-SGG-Bench cell, axis, the OVS and each
leave-one-axis-out value, paired across systems (issue 15, deliverable 5).

One draw matrix per benchmark (seeded by the configured seed and the benchmark's name) resamples
that benchmark's images; every system scored there sees the same draws, so the differences between
systems are paired and image difficulty cancels. A draw moves every quantity the way the point
estimate is computed from the same images: a cell's headline and its chance level where that is
measured on the data (A2's prevalence, A4's pair-recall ceiling), then the per-axis mean over
benchmarks, then the harmonic mean. A5 comes from a separate judge run and enters each draw as its
point value. Under the ``sgb`` protocol recall cells keep no per-image state, so A1/A4 (and with
them the OVS) get no interval.

Stage split: :func:`cell_kit` runs inside the scoring task and returns a small picklable kit;
:func:`bootstrap_systems` runs in the driver once every cell is scored.
"""

from __future__ import annotations

import hashlib
import zlib
from typing import Any, Mapping, Sequence

import numpy as np
from pydantic import Field

from relate.config import StrictConfig
from relate.metrics.bootstrap import bootstrap_p_value, resample_weights
from relate.metrics.resample import (CeilingKit, LabelledKit, RecallKit, ap_draws, auc_draws, ceiling_draws,
                                     percentile_interval, prevalence_draws, recall_draws)

__all__ = ["BootstrapSpec", "cell_kit", "images_checksum", "benchmark_draws", "bootstrap_systems"]


class BootstrapSpec(StrictConfig):
    resamples: int = Field(default=1000, ge=0, description="image resamples per benchmark (0: no intervals)")
    seed: int = Field(default=0, description="seed of the draws; each benchmark adds a hash of its name")
    confidence: float = Field(default=0.95, gt=0, lt=1, description="coverage of the percentile intervals")


def images_checksum(image_ids: Sequence[str]) -> str:
    """sha256 of the benchmark's image ids in order: two runs pair draw for draw only when equal."""
    return hashlib.sha256("\n".join(map(str, image_ids)).encode()).hexdigest()[:16]


def cell_kit(axis: str, gt, *, rows: Sequence[Mapping] | None = None, k: int | None = None,
             ceiling: tuple[np.ndarray, np.ndarray] | None = None, cells=None, scores: np.ndarray | None = None,
             codes: Sequence[str] | None = None, vocabulary_size: int | None = None) -> dict[str, Any]:
    """What a cell's headline needs under resampling (built in the scoring task)."""
    kit: dict[str, Any] = {"axis": axis, "n_images": gt.n_images, "images": images_checksum(gt.image_ids.tolist()),
                           "vocabulary_size": vocabulary_size}
    if axis in ("A1", "A3", "A4"):
        kit["recall"] = RecallKit.from_rows(rows or [], gt.index_of(), int(k))
    if axis == "A4":
        rel, cov = ceiling
        has = np.flatnonzero(rel)
        kit["ceiling"] = CeilingKit(has, rel[has], cov[has])
    if axis in ("A2", "A6"):
        names = tuple(sorted(set(cells.predicate.astype(str).tolist())))
        code = {p: i for i, p in enumerate(names)}
        kit["labelled"] = LabelledKit(cells.image.astype(np.int64),
                                      np.array([code[p] for p in cells.predicate.astype(str)], dtype=np.int64),
                                      cells.label.astype(bool), np.asarray(scores, dtype=np.float64), names)
        kit["codes"] = [code[p] for p in (codes or []) if p in code]
    return kit


def benchmark_draws(name: str, n_images: int, spec: BootstrapSpec) -> np.ndarray:
    """(B, n_images) draw counts for one benchmark (the same for every system scored on it)."""
    return resample_weights(n_images, spec.resamples, spec.seed + zlib.crc32(name.encode()))


def _clip01(x: np.ndarray) -> np.ndarray:
    return np.clip(x, 0.0, 1.0)


def _nanmean(x: np.ndarray) -> np.ndarray:
    ok = np.isfinite(x)
    n = ok.sum(axis=1)
    return np.where(n > 0, np.where(ok, x, 0.0).sum(axis=1) / np.maximum(n, 1), np.nan)


def _cell_draws(kit: Mapping[str, Any], W: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(raw headline, chance-corrected) per draw, as eval_jobs.ovsgg_cells.cell_axis computes them."""
    ax = kit["axis"]
    if ax in ("A1", "A3", "A4"):
        r = recall_draws(kit["recall"], W)
        if ax == "A4":
            ceil = ceiling_draws(kit["ceiling"], W)
            with np.errstate(invalid="ignore", divide="ignore"):
                return r["wR"], np.where(ceil > 0, _clip01(r["wR"] / np.where(ceil > 0, ceil, 1.0)), 0.0)
        raw = r["F1"] if ax == "A1" else r["mR"]
        c = 1.0 / kit["vocabulary_size"]
        return raw, _clip01((raw - c) / (1 - c))
    lab = kit["labelled"]
    if ax == "A2":
        raw = _nanmean(ap_draws(lab, W, kit["codes"]))
        prev = prevalence_draws(lab, W)
        return raw, _clip01((raw - prev) / (1 - prev))
    raw = _nanmean(auc_draws(lab, W, kit["codes"]))
    return raw, _clip01((raw - 0.5) / 0.5)


def _harmonic(cols: list[np.ndarray]) -> np.ndarray:
    v = np.stack(cols, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = v.shape[1] / (1.0 / np.where(v > 0, v, 1.0)).sum(axis=1)
    return np.where((v <= 0).any(axis=1), 0.0, np.where(np.isnan(v).any(axis=1), np.nan, h))


def _iv(point: float | None, draws: np.ndarray, confidence: float) -> dict:
    lo, hi = percentile_interval(draws, confidence)
    return {"estimate": point, "low": lo, "high": hi}


def _diff(point: float, draws: np.ndarray, confidence: float) -> dict:
    lo, hi = percentile_interval(draws, confidence)
    p, bound = bootstrap_p_value(point, draws)
    return {"estimate": point, "low": lo, "high": hi, "p_value": p, "p_bound": bound,
            "significant": bool(np.isfinite(lo) and (lo > 0 or hi < 0))}


def bootstrap_systems(kits: Mapping[tuple[str, str], Mapping[str, Any]], systems: Mapping[str, Mapping[str, Any]],
                      points: Mapping[tuple[str, str], tuple[float, float]],
                      spec: BootstrapSpec) -> tuple[dict, dict[str, dict]]:
    """Intervals for every system and paired differences between every two systems.

    ``kits``: (system, benchmark) -> cell kit; ``systems``: the results' per-system dicts (cells,
    axes, composite); ``points``: (system, benchmark) -> the cell's reported (raw, chance-corrected)
    headline. Intervals are centred on the reported values. Returns (the results.json
    ``bootstrap`` section, {system: {quantity: draws}} for the draws file).
    """
    benches = {b: k for (_, b), k in kits.items()}
    W = {b: benchmark_draws(b, k["n_images"], spec) for b, k in benches.items()}
    draws: dict[str, dict[str, np.ndarray]] = {}
    section: dict[str, Any] = {"resamples": spec.resamples, "seed": spec.seed, "confidence": spec.confidence,
                               "images": {b: k["images"] for b, k in sorted(benches.items())}, "systems": {}}
    for s, res in systems.items():
        d: dict[str, np.ndarray] = {}
        by_axis: dict[str, list[np.ndarray]] = {}
        cells_iv = {}
        for b, cell in res["cells"].items():
            if (s, b) not in kits:
                continue
            raw, norm = _cell_draws(kits[(s, b)], W[b])
            d[f"cell:{b}:raw"], d[f"cell:{b}:norm"] = raw, norm
            by_axis.setdefault(cell["axis"], []).append(norm)
        for b in res["cells"]:
            if f"cell:{b}:raw" in d:
                raw0, norm0 = points.get((s, b), (None, None))
                cells_iv[b] = {"raw": _iv(raw0, d[f"cell:{b}:raw"], spec.confidence),
                               "norm": _iv(norm0, d[f"cell:{b}:norm"], spec.confidence)}
        axes_iv = {}
        n_cells = {ax: sum(c["axis"] == ax for c in res["cells"].values()) for ax in by_axis}
        for ax, cols in by_axis.items():
            if len(cols) == n_cells[ax]:  # every benchmark of the axis resampled
                d[f"axis:{ax}"] = np.mean(np.stack(cols, axis=1), axis=1)
                axes_iv[ax] = _iv(res["axes"][ax]["norm"], d[f"axis:{ax}"], spec.confidence)
        if "A5" in res["axes"]:  # from a judge run, not resampled here
            d["axis:A5"] = np.full(spec.resamples, res["axes"]["A5"]["norm"])
        comp = res.get("composite")
        out: dict[str, Any] = {"cells": cells_iv, "axes": axes_iv, "ovs": None, "leave_one_axis_out": {}}
        if comp and all(f"axis:{a}" in d for a in comp["axis_set"]):
            cols = [d[f"axis:{a}"] for a in comp["axis_set"]]
            d["ovs"] = _harmonic(cols)
            out["ovs"] = _iv(comp["ovs"], d["ovs"], spec.confidence)
            if len(cols) > 1:
                for i, a in enumerate(comp["axis_set"]):
                    d[f"loao:{a}"] = _harmonic(cols[:i] + cols[i + 1:])
                    out["leave_one_axis_out"][a] = _iv(comp["leave_one_out"].get(a), d[f"loao:{a}"], spec.confidence)
        section["systems"][s] = out
        draws[s] = d
    section["differences"] = _differences(systems, draws, points, spec)
    return section, draws


def _point(res: Mapping[str, Any], q: str, cell: Mapping[str, tuple[float, float]]) -> float | None:
    if q.startswith("cell:"):
        return cell.get(q.split(":")[1], (None, None))[1]
    if q == "ovs":
        return (res.get("composite") or {}).get("ovs")
    if q.startswith("axis:"):
        return res["axes"].get(q[5:], {}).get("norm")
    if q.startswith("loao:"):
        return (res.get("composite") or {}).get("leave_one_out", {}).get(q[5:])
    return None


def _differences(systems: Mapping[str, Mapping[str, Any]], draws: Mapping[str, Mapping[str, np.ndarray]],
                 points: Mapping[tuple[str, str], tuple[float, float]], spec: BootstrapSpec) -> list[dict]:
    """Every pair of systems (in config order) on every quantity both have: each cell's
    chance-corrected value, each axis, the OVS and each leave-one-axis-out value (A5 is not
    resampled, so its difference has no interval and is left out)."""
    names = list(systems)
    per = {s: {b: v for (t, b), v in points.items() if t == s} for s in names}
    out = []
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            for q in sorted(set(draws[a]) & set(draws[b])):
                if (q.startswith("cell:") and not q.endswith(":norm")) or q == "axis:A5":
                    continue
                pa_, pb = _point(systems[a], q, per[a]), _point(systems[b], q, per[b])
                if pa_ is None or pb is None:
                    continue
                out.append({"a": a, "b": b, "quantity": q,
                            **_diff(float(pa_) - float(pb), draws[a][q] - draws[b][q], spec.confidence)})
    return out

