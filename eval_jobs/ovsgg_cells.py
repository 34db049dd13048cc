"""One OV-SGG-Bench cell, Ray-free: read a benchmark, score one system's predictions on it (A1-A4,
A6), and turn cells into per-axis raw and chance-corrected values (seed 001, 5.4).

``eval_jobs.ovsgg`` runs these as Ray tasks over every (system, benchmark) cell.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from eval_jobs.intervals import cell_kit
from eval_jobs.ovsgg_config import BenchmarkSpec, OVSGGConfig, SynonymSpec
from relate.data.readers import BenchmarkData, read_benchmark
from relate.metrics import (chance_correct, evaluate_open_vocab, evaluate_recall, spatial_auc, load_cells,
                            load_detections, load_ground_truth, load_predictions, pair_recall_ceiling,
                            prior_violation_check, ratio_to_reference, recall_chance, score_cells, shared_triplet_mass)
from relate.metrics.federated import federated_scores
from relate.metrics.openvocab import calibrate_synonym_threshold
from relate.metrics.pairs import relations_covered

__all__ = ["SGB_LOADED_READERS", "load_benchmark", "score_cell", "cell_axis", "axis_scores", "embed_fn", "synonym_groups"]


# readers that load ground truth by Scene-Graph-Benchmark's rules when the job's protocol is "sgb"
SGB_LOADED_READERS = ("vg150", "indoorvg")


def load_benchmark(spec: BenchmarkSpec, protocol: str = "paper") -> BenchmarkData:
    """Read one benchmark split as ``spec`` says; under ``protocol`` "sgb" the VG readers keep the
    ground truth Scene-Graph-Benchmark's loader keeps (its boxes, self relations, images)."""
    if spec.reader == "parquet":
        from relate.schema import CORPUS_SCHEMA, to_table

        t = to_table(pq.read_table(spec.path), CORPUS_SCHEMA, table=spec.path)
        preds = tuple(sorted({r["predicate"] for rel in t.column("relations").to_pylist() for r in rel}))
        return BenchmarkData(spec.name, t, None, preds)
    kw: dict[str, Any] = {"split": spec.split, **spec.reader_options}
    if spec.reader == "hico_det" and spec.axis == "A2":
        kw["cells"] = True
    if spec.reader in SGB_LOADED_READERS:
        if kw.get("protocol", protocol) != protocol:
            raise ValueError(f"benchmark {spec.name!r}: reader_options protocol {kw['protocol']!r} disagrees with the "
                             f"job's protocol {protocol!r}; the ground truth is loaded by the rules it is scored by")
        kw["protocol"] = protocol
    try:
        return read_benchmark(spec.reader, spec.path, **kw)
    except TypeError as exc:  # an option the reader does not take
        raise ValueError(f"benchmark {spec.name!r}: reader {spec.reader!r} rejected options {sorted(kw)}: {exc}") from None


def embed_fn(encoder: str):
    from relate.text.encoders import load_text_encoder

    enc = load_text_encoder(encoder)
    return lambda strings: enc.encode(list(strings))


def synonym_groups(spec: SynonymSpec) -> dict[str, list[str]]:
    if spec.groups == "lexicon":
        from relate.data.lexicon import CONCEPTS

        return {c.name: list(c.forms) for c in CONCEPTS.values()}
    return json.loads(Path(spec.groups).read_text())


def _scene_graphs_cell(spec: BenchmarkSpec, bench: BenchmarkData, gt, predictions: str | pa.Table,
                       cfg: OVSGGConfig, out: dict) -> dict | None:
    """A1/A4 from a file carrying its own objects (SCENE_GRAPHS_SCHEMA, e.g. an SGB / OpenPSG output
    from eval_jobs.convert): predcls / sgcls / sgdet linked to the GT by IoU; None for other files."""
    from relate.metrics.scene_graphs import evaluate_scene_graphs, labels_scored, load_scene_graphs

    cols = pq.read_schema(predictions).names if isinstance(predictions, str) else predictions.column_names
    if "objects" not in cols:
        return None
    sg = load_scene_graphs(predictions, gt)
    kw: dict[str, Any] = dict(ks=cfg.ks, graph_constrained=cfg.graph_constrained, iou_threshold=spec.iou_threshold)
    if cfg.protocol == "sgb":
        kw.update(protocol="sgb", predicates=list(bench.predicates))
        scored = True
    else:  # labels count whenever the file predicts them, unless the spec says otherwise
        scored = labels_scored(sg, spec.require_category)
        kw.update(matcher=cfg.matcher, require_category=scored, per_image=True)
    _put_recall(out, evaluate_scene_graphs(gt, sg, **kw))
    if spec.axis == "A4":  # the ceiling of the boxes that were scored, linked by the same rule
        out["pair_recall"] = pair_recall_ceiling(gt, sg.objects, iou_threshold=spec.iou_threshold,
                                                 require_category=scored,
                                                 one_to_one=cfg.matcher == "one_to_one" and cfg.protocol == "paper")
    return out


def score_cell(spec: BenchmarkSpec, bench: BenchmarkData, predictions: str | pa.Table, cfg: OVSGGConfig,
               train: str | pa.Table | None = None) -> dict:
    """All metrics of one system on one benchmark, for its axis. With bootstrap on, the cell also
    carries its resampling kit under ``_kit`` (popped by main before anything is written)."""
    gt = load_ground_truth(bench.corpus)
    V = spec.vocabulary_size or bench.vocabulary_size or int(gt.predicates.size)
    out: dict[str, Any] = {"axis": spec.axis, "benchmark": spec.name, "vocabulary_size": V}
    if bench.gt_rows() is not None:  # the reference loader's row counts beside ours (equal under sgb)
        out["gt_rows"] = bench.gt_rows()
    boot = cfg.bootstrap.resamples > 0
    recall_kit = boot and cfg.protocol == "paper"  # sgb keeps no per-image state
    rk: dict[str, Any] = dict(ks=cfg.ks, graph_constrained=cfg.graph_constrained, matcher=cfg.matcher,
                              per_image=True)
    if cfg.protocol == "sgb":  # mR divides by the benchmark's whole predicate list
        rk = dict(ks=cfg.ks, graph_constrained=cfg.graph_constrained, protocol="sgb",
                  predicates=list(bench.predicates))
    if spec.axis in ("A1", "A4") and _scene_graphs_cell(spec, bench, gt, predictions, cfg, out) is not None:
        return out
    if spec.axis == "A4":
        det = load_detections(pq.read_table(spec.detections), gt, name=spec.detections)
        nb = dict(zip(gt.image_ids.tolist(), det.n_boxes.tolist()))
        preds = load_predictions(predictions, gt, n_boxes=nb)
        # the detector's classes are not the system's: unless the spec asks, they do not gate a link (sgb: always)
        scored = cfg.protocol == "sgb" or bool(spec.require_category)
        extra = {} if cfg.protocol == "sgb" else {"require_category": scored}
        _put_recall(out, evaluate_recall(gt, preds, detections=det, iou_threshold=spec.iou_threshold, **extra, **rk))
        ceil = dict(iou_threshold=spec.iou_threshold, require_category=scored,
                    one_to_one=cfg.matcher == "one_to_one" and cfg.protocol == "paper")
        out["pair_recall"] = pair_recall_ceiling(gt, det, **ceil)
        if recall_kit:
            out["_kit"] = cell_kit("A4", gt, rows=out.get("_per_image"), k=cfg.headline_k,
                                   ceiling=relations_covered(gt, det, **ceil))
        return out
    preds = load_predictions(predictions, gt)
    if spec.axis == "A1":
        _put_recall(out, evaluate_recall(gt, preds, **rk))
        if recall_kit:
            out["_kit"] = cell_kit("A1", gt, rows=out["_per_image"], k=cfg.headline_k, vocabulary_size=V)
        if train is not None:
            train = pq.read_table(train) if isinstance(train, str) else train
            out["triplet_mass"] = shared_triplet_mass(train, bench.corpus)
            if cfg.prior_watch:  # H.3: a prior the training data states, checked on the output
                out["prior_violation"] = prior_violation_check(train, gt, preds, set(cfg.prior_watch),
                                                               top_k=cfg.headline_k)
    elif spec.axis in ("A2", "A6"):
        if bench.cells is None:
            raise ValueError(f"benchmark {spec.name!r} ({spec.reader}) has no labelled cells; axis {spec.axis} needs them")
        cells = load_cells(bench.cells, gt, name=f"{spec.name} cells")
        score, covered = score_cells(cells, preds)
        if spec.axis == "A2":
            f = out["federated"] = federated_scores(cells, score, covered, min_support=spec.min_support)
            headline = [p for p in f["per_predicate_ap"] if f["positives"][p] >= spec.min_support]
        else:
            f = out["spatial"] = spatial_auc(cells, score)
            f["pair_coverage"] = float(covered.mean()) if covered.size else float("nan")
            headline = list(f["per_predicate"])
        if boot:
            out["_kit"] = cell_kit(spec.axis, gt, cells=cells, scores=score, codes=headline)
    elif spec.axis == "A3":
        embed = embed_fn(cfg.synonyms.encoder)
        from relate.metrics.openvocab import SynonymMatcher

        matcher = (SynonymMatcher(cfg.synonyms.threshold, cfg.synonyms.encoder) if cfg.synonyms.threshold is not None
                   else calibrate_synonym_threshold(embed, synonym_groups(cfg.synonyms), space=cfg.synonyms.encoder))
        vname, vocab = spec.answer_vocabulary(bench)
        V = out["vocabulary_size"] = spec.vocabulary_size or len(vocab)
        m = matcher.match_matrix(embed, list(preds.vocab), list(gt.predicates), space=cfg.synonyms.encoder)
        ov = evaluate_open_vocab(gt, preds, m, ks=cfg.ks, graph_constrained=cfg.graph_constrained,
                                 vocabulary_size=V, per_image=cfg.protocol == "paper")
        rows = ov.pop("per_image", None)
        known = set(vocab)
        answered = {str(p) for p in preds.vocab[np.unique(preds.predicate)]} if preds.predicate.size else set()
        outside = sorted(answered - known)
        ov["threshold"] = matcher.threshold
        ov["vocabulary"] = {"name": vname, "size": V, "answered_strings": len(answered),
                            "answered_outside": len(outside), "examples_outside": outside[:10],
                            "gt_strings_outside": sorted({str(p) for p in gt.predicates} - known)[:50]}
        out["open_vocab"] = ov
        if rows is not None:
            out["_per_image"] = [{"benchmark": spec.name, "axis": "A3", **r} for r in rows]
            if recall_kit:
                out["_kit"] = cell_kit("A3", gt, rows=rows, k=cfg.headline_k, vocabulary_size=V)
    return out


def _put_recall(out: dict, r) -> None:
    """The recall report goes into the cell; its per-image rows ride along under ``_per_image``
    until main() writes them to PER_IMAGE_FILE (they stay out of results.json)."""
    out["recall"] = r.to_dict()
    if r.per_image is not None:
        out["_per_image"] = [{"benchmark": out["benchmark"], "axis": out["axis"], **row} for row in r.per_image]


def cell_axis(c: dict, k: int) -> tuple[float, float]:
    """(raw headline, chance-corrected) of one cell (5.4: 1/V for recall, prevalence for fAP,
    0.5 for AUC; A4 divided by the pair-recall ceiling)."""
    ax = c["axis"]
    if ax == "A1":
        x = c["recall"]["metrics"][f"F1@{k}"]
        return x, chance_correct(x, recall_chance(c["vocabulary_size"]))
    if ax == "A2":
        f = c["federated"]
        return f["fAP"], chance_correct(f["fAP"], f["prevalence"])
    if ax == "A3":
        m = c["open_vocab"]["metrics"]
        return m[f"mR@{k}"], chance_correct(m[f"mR@{k}"], recall_chance(int(m["vocabulary_size"])))
    if ax == "A4":
        w, ceil = c["recall"]["metrics"][f"wR@{k}"], c["pair_recall"]["ceiling"]
        return w, ratio_to_reference(w, ceil) if ceil > 0 else 0.0
    auc = c["spatial"]["macro_auc"]
    return auc, chance_correct(auc, 0.5)


_MEASURES = {"A1": "F1@{k}", "A2": "mean fAP", "A3": "open-vocab mR@{k}", "A4": "wR@{k} / pair-recall ceiling",
             "A6": "macro AUC"}


def axis_scores(cells: list[dict], a5: float | None, k: int) -> dict[str, dict]:
    """Raw headline and chance-corrected value per axis, each averaged over that axis's
    benchmarks (A1 enters as F1@K averaged over its sources, 5.4). NaN cells become None."""
    axes: dict[str, dict] = {}
    for ax in ("A1", "A2", "A3", "A4", "A6"):
        vals = []
        for c in cells:
            if c["axis"] == ax:
                try:
                    vals.append(cell_axis(c, k))
                except ValueError:  # e.g. no predicate reached min_support: no defined chance level
                    vals.append((float("nan"), float("nan")))
        if vals:
            raw, norm = (float(np.mean(v)) for v in zip(*vals))
            axes[ax] = {"raw": raw, "norm": None if math.isnan(norm) else norm,
                        "measure": _MEASURES[ax].format(k=k) + (" (mean over benchmarks)" if len(vals) > 1 else "")}
    if a5 is not None:
        axes["A5"] = {"raw": a5, "norm": float(min(max(a5, 0.0), 1.0)), "measure": "share of annotation bits"}
    return axes
