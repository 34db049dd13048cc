"""Fit the Platt parameters (a, b) of Eq. 6 for one checkpoint and install them (seed 001, D.4, Fig. 18).

Two things a fit can be made against, and they mean different things:

- a corpus split (``--on val``): every scored (pair, predicate) cell of the split, scored on
  ground-truth boxes with the checkpoint's own vocabulary; a hit is an annotated triple
  (synonym-tolerant by default: any surface form of the annotated synonym group). The score then
  estimates the probability that a relation appears in the annotation.
- a benchmark with adjudicated negatives (``--on haystack:/data/haystack``; any reader that
  returns labelled cells: haystack, spatialsense, hico_det): only the labelled cells, scored with
  the benchmark's predicates. The score then estimates the probability that a person judges the
  relation true, which is what a deployment threshold asks.

Cells on pairs the sampler pruned have no score and are left out. The out-of-fold fit gives the
honest ECE in the report; the map installed in ``calibration.json`` is then fitted on all cells.
The output folder (default ``<checkpoint>/calibration/``) holds ``calibration_report.json``,
``calibration.json`` and ``reliability.png`` (raw sigmoid vs calibrated, hit rate per bin).
A checkpoint at a URI (``s3://...``, ``gs://...``) is scored from a verified temporary copy; the
map and the report folder are then written back beside it.

    python -m train_jobs.calibrate --checkpoint CKPT --on val --corpus-root runs/synthetic
    python -m train_jobs.calibrate --checkpoint s3://bucket/runs/relation/checkpoint_000002 --on val
    python -m train_jobs.calibrate --checkpoint CKPT --on spatialsense:/data/spatialsense --set benchmark_split=valid

A fit never uses the split that is then reported unless asked: ``on=test`` and
``benchmark_split=test`` are refused without ``fit_on_reported_split=true``, because a map fitted
on the test images makes that split's calibration error look better than it is on new images.
A benchmark fit names its split (benchmarks differ: SpatialSense has ``valid``, HICO-DET only
``train`` and ``test``).
"""

from __future__ import annotations

import functools
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from relate.config import StrictConfig, load_config
from relate.storage import Location, LocationValue
from relate.data.corpus import SPLITS, require_corpus
from relate.job_inputs import one_line_errors, require_checkpoint
from relate.metrics.calibration import (Calibration, expected_calibration_error, fit_platt, platt_out_of_fold,
                                        reliability_bins)

__all__ = ["CalibrateConfig", "CalibrateResult", "split_cells", "benchmark_cells", "main", "calibrate_checkpoint",
           "REPORT_FILE", "FIGURE_FILE"]

REPORT_FILE = "calibration_report.json"
FIGURE_FILE = "reliability.png"


class CalibrateConfig(StrictConfig):
    checkpoint: Location = Field(description="checkpoint: a local folder, or a URI (s3://, gs://, ...: relate.storage) "
                            "fitted on a temporary local copy; its calibration.json is replaced by the fit")
    on: str = Field("val", description="what to fit on: a corpus split (train, val, test) under corpus_root, "
                    "against annotation hits; or READER:PATH of a benchmark with adjudicated negatives "
                    "(haystack, spatialsense, hico_det), against its labelled cells")
    corpus_root: Location = Field("runs/synthetic", description="folder holding corpus/<split>/*.parquet (split fits)")
    predicates: Literal["synthetic_lexicon", "text_resources"] = Field(
        "synthetic_lexicon", description="where synonym groups come from (train_jobs.relation_data.concept_key)")
    match: Literal["synonym", "exact"] = Field("synonym", description="split fits: a cell is a hit when its string "
                                               "is in an annotated predicate's synonym group, or only the exact string")
    benchmark_split: str | None = Field(None, description="benchmark fits: the split the reader reads (required; "
                                        "e.g. valid for SpatialSense, train for HICO-DET)")
    fit_on_reported_split: bool = Field(False, description="allow fitting on a test split (on=test or "
                                        "benchmark_split=test), the split whose figures are reported")
    reader_options: dict[str, str | int | float | bool] = Field(
        default_factory=dict, description="benchmark fits: extra keyword arguments of the reader (relate.data.readers)")
    limit: int | None = Field(None, gt=0, description="score only the first N images (sorted by image_id)")
    max_cells: int = Field(4_000_000, gt=0, description="split fits: cells kept at most; above it a uniform random "
                           "share of cells is kept (prevalence unchanged)")
    targets: Literal["platt", "hard"] = Field("platt", description="Platt's smoothed targets or the 0/1 labels "
                                              "(relate.metrics.calibration)")
    folds: int = Field(5, ge=2, description="folds of the out-of-fold fit behind the reported ECE")
    bins: int = Field(15, ge=2, description="equal-width bins of the ECE and the reliability diagram")
    seed: int = Field(0, description="seed of the folds and of cell subsampling")
    device: str = Field("auto", description="torch device for scoring ('auto': cuda when available, else cpu)")
    batch_size: int = Field(8, gt=0, description="images per forward pass")
    out_dir: LocationValue | None = Field(None, description="report folder, local or a URI (default: <checkpoint>/calibration, "
                                "uploaded beside a checkpoint at a URI)")
    install: bool = Field(True, description="write the fitted map into the checkpoint's calibration.json")

    @model_validator(mode="after")
    def _check(self) -> "CalibrateConfig":
        if self.on not in SPLITS and ":" not in self.on:
            raise ValueError(f"on={self.on!r}: expected a corpus split {list(SPLITS)} or READER:PATH of a benchmark "
                             "with adjudicated negatives, e.g. haystack:/data/haystack")
        if self.on not in SPLITS and self.benchmark_split is None:
            raise ValueError(f"on={self.on!r}: a benchmark fit needs benchmark_split (a split that is not reported, "
                             "e.g. valid for SpatialSense, train for HICO-DET)")
        fit_split = self.on if self.on in SPLITS else self.benchmark_split
        if fit_split == "test" and not self.fit_on_reported_split:
            field = "on" if self.on in SPLITS else "benchmark_split"
            raise ValueError(f"{field}=test: calibrating on the reported split makes its calibration error "
                             "optimistic; fit on val (corpus) or a benchmark's train/valid split, or set "
                             "fit_on_reported_split=true to mean it")
        return self

    @property
    def benchmark(self) -> tuple[str, str] | None:
        """(reader, path) for a benchmark fit, None for a split fit."""
        if self.on in SPLITS:
            return None
        reader, path = self.on.split(":", 1)
        return reader, path


@dataclass
class CalibrateResult:
    calibration: Calibration
    report: dict
    report_path: str
    figure_path: str
    installed: bool


def _device(name: str) -> str:
    if name != "auto":
        return name
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _chunks(n: int, size: int):
    for start in range(0, n, size):
        yield start, min(n, start + size)


def split_cells(predictor, cfg: CalibrateConfig) -> tuple[np.ndarray, np.ndarray, dict]:
    """(fused logit, hit) over every scored (pair, predicate) cell of a corpus split, plus counts.

    Scored on ground-truth boxes with the checkpoint's vocabulary. A hit is an annotated triple
    (``match``: its synonym group or its exact string). Cells are kept uniformly at random when
    the split has more than ``max_cells`` (the rate is set from the first chunk of images).
    """
    from relate.data.corpus import read_corpus
    from relate.model.score import relation_logit
    from train_jobs.relation_data import concept_key

    table = read_corpus(cfg.corpus_root, cfg.on)
    if cfg.limit is not None:
        table = table.slice(0, cfg.limit)
    if table.num_rows == 0:
        raise ValueError(f"{cfg.corpus_root}: split {cfg.on!r} has no images to calibrate on")
    key = functools.lru_cache(maxsize=None)(  # one look-up per distinct string
        (lambda s: concept_key(s, cfg.predicates)) if cfg.match == "synonym" else (lambda s: s.strip()))
    strings = list(predictor.vocabulary)
    cols: dict[str, list[int]] = {}
    for j, s in enumerate(strings):
        cols.setdefault(key(s), []).append(j)
    w = float(predictor.model.cfg.pair_weight)
    rng = np.random.default_rng(cfg.seed)
    uris, boxes = table.column("uri").to_pylist(), table.column("boxes").to_pylist()
    relations = table.column("relations").to_pylist()
    zs, ys, rate = [], [], None
    n_ann = n_scored = n_cells = 0
    for start, stop in _chunks(table.num_rows, 64):
        z_chunk, y_chunk = [], []
        for s, rels in zip(predictor.score_images(uris[start:stop], boxes[start:stop]), relations[start:stop]):
            ann: dict[tuple[int, int], set[str]] = {}
            for r in rels:
                ann.setdefault((r["subject"], r["object"]), set()).add(key(r["predicate"]))
            n_ann += sum(len(v) for v in ann.values())
            row_of = {(int(a), int(b)): i for i, (a, b) in enumerate(s.pairs)}
            z = relation_logit(s.l_pred, s.l_pair, w)
            hit = np.zeros(z.shape, dtype=bool)
            for pair, keys in ann.items():
                i = row_of.get(pair)
                if i is None:
                    continue  # the sampler pruned this pair: it has no cells
                for k in keys & cols.keys():
                    hit[i, cols[k]] = True
                    n_scored += 1
            z_chunk.append(z.reshape(-1))
            y_chunk.append(hit.reshape(-1))
        z_all, y_all = np.concatenate(z_chunk), np.concatenate(y_chunk)
        n_cells += z_all.size
        if rate is None:
            rate = min(1.0, cfg.max_cells / max(1.0, z_all.size / (stop - start) * table.num_rows))
        if rate < 1.0:
            keep = rng.random(z_all.size) < rate
            z_all, y_all = z_all[keep], y_all[keep]
        zs.append(z_all.astype(np.float64))
        ys.append(y_all)
    info = {"kind": "split", "corpus_root": cfg.corpus_root, "split": cfg.on, "match": cfg.match,
            "predicates": cfg.predicates, "images": table.num_rows, "vocabulary_size": len(strings),
            "cells_scored": n_cells, "cell_fraction": rate, "annotated_triples": n_ann,
            "annotated_triples_scored": n_scored}
    return np.concatenate(zs), np.concatenate(ys), info


def benchmark_cells(predictor, cfg: CalibrateConfig) -> tuple[np.ndarray, np.ndarray, dict]:
    """(fused logit, label) over the adjudicated cells of a benchmark whose pair was scored.

    Scored on ground-truth boxes with the benchmark's cell predicates as the vocabulary; a
    labelled cell on a pair the sampler pruned has no score and is counted as uncovered.
    """
    from relate.data.readers import read_benchmark

    reader, path = cfg.benchmark
    kw: dict = {"split": cfg.benchmark_split, **cfg.reader_options}
    if reader == "hico_det":
        kw.setdefault("cells", True)  # HICO-DET reads its no_interaction negatives only when asked
    try:
        bench = read_benchmark(reader, path, **kw)
    except TypeError as exc:  # an option the reader does not take
        raise ValueError(f"on={cfg.on!r}: reader {reader!r} rejected options {sorted(kw)}: {exc}") from None
    if bench.cells is None:
        raise ValueError(f"on={cfg.on!r}: benchmark {bench.name!r} has no adjudicated cells (labelled negatives); "
                         "fit on a corpus split instead, or use haystack, spatialsense or hico_det")
    corpus = bench.corpus if cfg.limit is None else bench.corpus.slice(0, cfg.limit)
    by_image = {r["image_id"]: r["cells"] for r in bench.cells.to_pylist()}
    ids = corpus.column("image_id").to_pylist()
    vocab = sorted({c["predicate"].strip() for i in ids for c in by_image.get(i, [])})
    if not vocab:
        raise ValueError(f"on={cfg.on!r}: no labelled cells on the {len(ids)} images read")
    col = {p: j for j, p in enumerate(vocab)}
    w = float(predictor.model.cfg.pair_weight)
    uris, boxes = corpus.column("uri").to_pylist(), corpus.column("boxes").to_pylist()
    zs, ys, uncovered = [], [], 0
    for start, stop in _chunks(len(ids), 64):
        for image_id, s in zip(ids[start:stop], predictor.score_images(uris[start:stop], boxes[start:stop], vocab)):
            row_of = {(int(a), int(b)): i for i, (a, b) in enumerate(s.pairs)}
            for c in by_image.get(image_id, []):
                i = row_of.get((c["subject"], c["object"]))
                if i is None:
                    uncovered += 1
                    continue
                zs.append(float(s.l_pred[i, col[c["predicate"].strip()]]) + w * float(s.l_pair[i]))
                ys.append(bool(c["label"]))
    info = {"kind": "benchmark", "reader": reader, "path": path, "split": cfg.benchmark_split,
            "benchmark": bench.name, "images": len(ids), "vocabulary_size": len(vocab),
            "cells_labelled": len(zs) + uncovered, "cells_uncovered": uncovered}
    return np.asarray(zs, dtype=np.float64), np.asarray(ys, dtype=bool), info


def _bins(probs: np.ndarray, labels: np.ndarray, n_bins: int) -> dict:
    r = reliability_bins(probs, labels, n_bins)
    return {"edges": np.linspace(0, 1, n_bins + 1).tolist(), "count": r["count"].tolist(),
            "confidence": r["confidence"].tolist(), "hit_rate": r["accuracy"].tolist()}


def _draw(report: dict, path: Path) -> None:
    """Reliability diagram (hit rate vs mean confidence per bin, before and after) and bin counts."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 4.2))
    FigureCanvasAgg(fig)
    ax, hx = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.3, 1]})
    ax.plot([0, 1], [0, 1], color="0.6", ls="--", lw=1, label="perfect calibration")
    styles = (("before", f"raw sigmoid (ECE {report['ece_before']:.3f})", "tab:red"),
              ("after", f"Platt, out-of-fold (ECE {report['ece_after']:.3f})", "tab:blue"))
    centres = (np.asarray(report["bins"]["before"]["edges"][:-1]) + 0.5 / report["n_bins"])
    for key, label, colour in styles:
        b = report["bins"][key]
        n = np.asarray(b["count"])
        ok = n > 0
        ax.plot(np.asarray(b["confidence"])[ok], np.asarray(b["hit_rate"])[ok], "o-", color=colour, label=label,
                ms=4)
        hx.bar(centres + (-0.25 if key == "before" else 0.25) / report["n_bins"], n, width=0.5 / report["n_bins"],
               color=colour, label=key)
    ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="mean confidence in bin", ylabel="hit rate in bin",
           title=f"{report['n_cells']:,} cells, {report['n_positive']:,} hits")
    ax.legend(loc="upper left", fontsize=8)
    hx.set(yscale="log", xlim=(0, 1), xlabel="confidence bin", ylabel="cells", title="cells per bin")
    hx.legend(fontsize=8)
    fig.suptitle(f"Calibration of the relation score: a={report['a']:.3g}, b={report['b']:.3g}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(cfg: CalibrateConfig) -> CalibrateResult:
    """Score, fit out-of-fold (for the ECE) and on all cells, write the report, figure and map."""
    from relate.checkpoint import write_calibration
    from relate.storage import is_uri

    if is_uri(cfg.checkpoint):
        return _calibrate_copy(cfg)
    ckpt = Path(cfg.checkpoint)
    require_checkpoint(ckpt, "checkpoint (--checkpoint)")
    if not ckpt.is_dir():
        raise FileNotFoundError(f"checkpoint={cfg.checkpoint!r} is not a folder")
    if cfg.on in SPLITS:
        require_corpus(cfg.corpus_root, f"corpus to fit on (--corpus-root, split {cfg.on})", splits=[cfg.on])
    out = Path(cfg.out_dir) if cfg.out_dir else ckpt / "calibration"
    res, problem = _fit(cfg, ckpt, str(ckpt.resolve()), out, lambda cal: write_calibration(ckpt, cal))
    if problem is not None:
        raise ValueError(problem)
    return res


def _calibrate_copy(cfg: CalibrateConfig, filesystem=None, name: str | None = None) -> CalibrateResult:
    """A checkpoint at a URI (or at a path on ``filesystem``, called ``name`` in the report): fit on a
    temporary local copy, then upload ``calibration.json`` (only if the weights and bank are still the
    ones fitted on) and the report folder (default ``<checkpoint>/calibration``) beside it."""
    from relate.checkpoint import local_copy, write_calibration
    from relate.storage import is_uri, join, redact, resolve

    where = name or redact(cfg.checkpoint)
    remote_out = cfg.out_dir if cfg.out_dir and is_uri(cfg.out_dir) else None
    upload = cfg.out_dir is None or remote_out is not None
    shown = (redact(remote_out) if remote_out else join(where, "calibration")) if upload else None
    with local_copy(cfg.checkpoint, filesystem) as copy:
        seen = json.loads((copy / "meta.json").read_text())
        out = copy / "calibration" if upload else Path(cfg.out_dir)
        res, problem = _fit(cfg, copy, where, out, lambda cal: write_calibration(cfg.checkpoint, cal, filesystem,
                                                                                  expect_meta=seen), shown)
        if upload:
            fs, root = resolve(remote_out or join(cfg.checkpoint, "calibration"), None if remote_out else filesystem)
            fs.create_dir(root)
            for f in sorted(out.iterdir()):
                with fs.open_output_stream(f"{root.rstrip('/')}/{f.name}") as dst:
                    dst.write(f.read_bytes())
            res.report_path, res.figure_path = join(shown, REPORT_FILE), join(shown, FIGURE_FILE)
    if problem is not None:
        raise ValueError(problem)
    return res


def _fit(cfg: CalibrateConfig, ckpt: Path, where_ckpt: str, out: Path, install,
         out_shown: str | None = None) -> tuple[CalibrateResult, str | None]:
    """Fit on the local checkpoint folder ``ckpt``, write the report folder ``out`` (``out_shown``: where
    it ends up, for messages), call ``install(cal)``; returns the result and the reason it was not
    installed (None when it was, or was not asked)."""
    from scipy.special import expit

    from relate.api import load_model
    from relate.checkpoint import CheckpointError
    from relate.storage import join

    predictor = load_model(ckpt, device=_device(cfg.device), batch_size=cfg.batch_size)
    previous = predictor.calibration
    z, y, info = (split_cells if cfg.benchmark is None else benchmark_cells)(predictor, cfg)
    where = f"{info.get('reader', 'split')}:{info.get('path', info.get('split'))}"
    if y.size == 0 or y.all() or not y.any():
        raise ValueError(f"{where}: {y.size} cells with {int(y.sum())} positive; a Platt fit needs hits and misses "
                         "(is the vocabulary the one the corpus is annotated with? see --set match=...)")
    raw = expit(z)
    oof = platt_out_of_fold(z, y, folds=cfg.folds, seed=cfg.seed, targets=cfg.targets)
    cal = fit_platt(z, y, targets=cfg.targets)
    fitted = expit(cal.a * z + cal.b)
    report = {"checkpoint": where_ckpt, "fitted_on": info, "n_cells": int(y.size),
              "n_positive": int(y.sum()), "prevalence": float(y.mean()), "a": cal.a, "b": cal.b,
              "targets": cfg.targets, "folds": cfg.folds, "n_bins": cfg.bins,
              "ece_before": expected_calibration_error(raw, y, cfg.bins),
              "ece_after": expected_calibration_error(oof, y, cfg.bins),
              "ece_in_sample": expected_calibration_error(fitted, y, cfg.bins),
              "ece_previous": (expected_calibration_error(expit(previous.a * z + previous.b), y, cfg.bins)
                               if previous.fitted else None),
              "previous": previous.to_dict(),
              "bins": {"before": _bins(raw, y, cfg.bins), "after": _bins(oof, y, cfg.bins),
                       "in_sample": _bins(fitted, y, cfg.bins)}}
    out.mkdir(parents=True, exist_ok=True)
    report_path, figure_path = out / REPORT_FILE, out / FIGURE_FILE
    shown = join(out_shown, REPORT_FILE) if out_shown else str(report_path)
    installed, problem = False, None
    if cfg.install:
        try:
            install(cal)
            installed = True
        except CheckpointError as exc:
            problem = str(exc)
    report.update({"installed": installed, "not_installed_because": problem})
    (out / "calibration.json").write_text(json.dumps(cal.to_dict()))
    report_path.write_text(json.dumps(report, indent=2))
    _draw(report, figure_path)
    print(f"calibration on {where}: {report['n_cells']} cells, {report['n_positive']} positive; a={cal.a:.4g} "
          f"b={cal.b:.4g}; ECE raw {report['ece_before']:.4f} -> out-of-fold {report['ece_after']:.4f}; "
          f"{'installed in ' + where_ckpt if installed else 'not installed'}; report {shown}", flush=True)
    problem = None if problem is None else f"{where}: {problem} (report in {shown})"
    return CalibrateResult(cal, report, str(report_path), str(figure_path), installed), problem


def calibrate_checkpoint(folder: str | Path, data_cfg, split: str = "val", limit: int | None = None,
                         filesystem=None, name: str | None = None) -> dict:
    """Fit and install the Platt map of a checkpoint (a local folder, a URI, or a path on the pyarrow
    ``filesystem`` such as a Ray Train checkpoint's, ``name`` being its URI for the report) on a split
    of the training corpus (``data_cfg``: the train job's DataConfig); returns the report."""
    cfg = CalibrateConfig(checkpoint=str(folder), on=split, corpus_root=data_cfg.corpus_root,
                          predicates=data_cfg.predicates, limit=limit)
    return (main(cfg) if filesystem is None else _calibrate_copy(cfg, filesystem, name)).report


def _cli(argv: list[str] | None = None) -> CalibrateResult:
    """``python -m train_jobs.calibrate --checkpoint DIR --on SPLIT_OR_READER:PATH [--corpus-root ROOT]``;
    ``--config`` and ``--set key=value`` reach every other field."""
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", help="checkpoint folder or URI (s3://bucket/run/checkpoint_...)")
    ap.add_argument("--on", help="corpus split (train, val, test) or READER:PATH of a benchmark with negatives")
    ap.add_argument("--corpus-root", help="folder holding corpus/<split>/*.parquet")
    ap.add_argument("--out", help="report folder (default: <checkpoint>/calibration)")
    ap.add_argument("--limit", type=int, help="score only the first N images")
    ap.add_argument("--config", default=None, help="YAML file over the defaults")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="override, e.g. --set targets=hard (repeatable)")
    one_line_errors("train_jobs.calibrate")
    args = ap.parse_args(argv)
    flags = {"checkpoint": args.checkpoint, "on": args.on, "corpus_root": args.corpus_root, "out_dir": args.out,
             "limit": args.limit}
    overrides = [f"{k}={json.dumps(v)}" for k, v in flags.items() if v is not None]  # JSON: a path stays a string
    return main(load_config(CalibrateConfig, args.config, overrides + args.overrides))


if __name__ == "__main__":
    _cli(sys.argv[1:])
