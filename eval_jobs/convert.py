"""Convert other systems' saved scene-graph outputs into the scene-graphs layout, and score them.

    python -m eval_jobs.convert --from sgb --input eval_results.pytorch --dicts VG-SGG-dicts-with-attri.json \\
        --benchmark-reader vg150 --benchmark-path data/vg150 --out sgdet.parquet --score true

Formats (``--from``):

* ``sgb``      Scene-Graph-Benchmark.pytorch's test output ``eval_results.pytorch`` (a dict whose
               ``predictions`` is one BoxList per test image, in the dataset's order) or a bare list
               of BoxLists. Per image: ``bbox`` (xyxy pixels of the original image), ``pred_labels``,
               ``pred_scores``, ``rel_pair_idxs`` and ``pred_rel_scores`` (column 0 = background,
               dropped); labels and predicates are named by the dataset's dicts JSON. The pair
               scores stay dense. The file is read with torch (imported here only) through an
               unpickler that admits tensors and stands in for maskrcnn_benchmark's classes.
* ``openpsg``  an OpenPSG submission folder: ``relation.json`` (per test image, in the dataset's
               order: ``relations`` [subject, object, predicate] ranked best first, ``segments_info``
               with 1-based ``category_id``, ``pan_seg_file_name``) and ``panseg/*.png``. Boxes are
               the segments' extents; predicates are 1-based into psg.json's ``predicate_classes``.
               It has no scores: rank r of n scores 1 - r / n, objects 1.
* ``vlm``      free-text triplets, JSON lines ``{"image_id", "triplets": [{"subject", "object",
               "predicate", "score"?}], "objects"?: [{"box": [x1, y1, x2, y2], "label", "score"}]}``;
               without ``objects`` the indices are the benchmark's GT boxes (predcls). Strings are
               mapped onto the benchmark's predicates in the text space at the calibrated synonym
               threshold (relate.metrics.openvocab); unmapped strings are dropped, counted and listed
               in ``<out>.report.json``. Without a score, list position r of n scores 1 - r / n.

The image order of ``sgb`` and ``openpsg`` outputs is their dataset's: the benchmark reader (or
``--image-ids``) supplies the image_id of each position, and a count mismatch is an error.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any, Literal, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import Field, model_validator

from relate.config import StrictConfig
from relate.schema import OBJECT_TYPE, PAIR_TYPE, TRIPLET_TYPE, SchemaError, scene_graphs_schema, validate_scene_graphs

__all__ = ["ConvertConfig", "FORMATS", "main", "read_sgb", "read_openpsg", "read_vlm", "map_predicates",
           "scene_graphs_table"]

FORMATS = ("sgb", "openpsg", "vlm")


class ConvertConfig(StrictConfig):
    source_format: Literal["sgb", "openpsg", "vlm"] = Field(description="format of --input (CLI: --from)")
    input: str = Field(description="the native output: eval_results.pytorch (sgb), the submission folder "
                                   "(openpsg) or a JSON-lines file (vlm)")
    out: str = Field(description="scene-graphs Parquet to write (relate.schema SCENE_GRAPHS_SCHEMA)")
    benchmark_reader: str | None = Field(default=None, description="reader of the evaluated split ('parquet' for a "
                                         "CORPUS_SCHEMA file, or vg150, psg, ...): image order, GT boxes, predicates")
    benchmark_path: str | None = Field(default=None, description="the benchmark's native folder or corpus Parquet")
    split: str = Field(default="test", description="split the output was computed on")
    image_ids: str | None = Field(default=None, description="instead of a benchmark: the image_id of each output "
                                  "position (JSON list or one per line)")
    dicts: str | None = Field(default=None, description="sgb: the dataset's dicts JSON (idx_to_label, idx_to_predicate)")
    psg_json: str | None = Field(default=None, description="openpsg: psg.json (thing_classes, stuff_classes, "
                                 "predicate_classes)")
    encoder: str = Field(default="minilm", description="vlm: text encoder whose space maps the strings")
    synonym_groups: str = Field(default="lexicon", description="vlm: synonym groups the threshold is calibrated on "
                                "('lexicon' or a JSON {group: [strings]} file)")
    threshold: float | None = Field(default=None, description="vlm: a fixed cosine threshold instead of calibrating")
    score: bool = Field(default=False, description="after writing, score the file on the benchmark (graph-"
                        "constrained and unconstrained) and add the metrics to the result")
    protocol: Literal["sgb", "paper"] = Field(default="sgb", description="protocol of --score")
    ks: list[int] = Field(default=[20, 50, 100], description="recall cut-offs of --score")

    @model_validator(mode="after")
    def _needs(self) -> "ConvertConfig":
        has_bench = self.benchmark_reader is not None and self.benchmark_path is not None
        if (self.benchmark_reader is None) != (self.benchmark_path is None):
            raise ValueError("benchmark_reader and benchmark_path go together")
        if self.source_format == "sgb" and not self.dicts:
            raise ValueError("--from sgb needs --dicts (the dataset's idx_to_label / idx_to_predicate JSON)")
        if self.source_format == "openpsg" and not self.psg_json:
            raise ValueError("--from openpsg needs --psg-json (its class and predicate lists)")
        if self.source_format in ("sgb", "openpsg") and not (has_bench or self.image_ids):
            raise ValueError(f"--from {self.source_format} needs the image order: a benchmark or --image-ids")
        if (self.source_format == "vlm" or self.score) and not has_bench:
            raise ValueError("--from vlm and --score need the benchmark (--benchmark-reader, --benchmark-path)")
        return self


# --------------------------------------------------------------------------- writing

def scene_graphs_table(ids: Sequence[str], images: Sequence[dict], predicates: Sequence[str]) -> pa.Table:
    """One row per image from dicts of numpy arrays: ``boxes`` (n, 4), ``labels`` (n,), ``scores``
    (n,), optional ``pairs`` (m, 2) with ``pair_scores`` (m, P), optional ``triplets`` (list of
    (subject, object, predicate, score)). Arrays are concatenated, not turned into Python rows."""
    P = len(predicates)
    cat = lambda key, shape: (np.concatenate([np.asarray(im.get(key, np.zeros(shape))).reshape((-1,) + shape[1:])  # noqa: E731
                                              for im in images]) if images else np.zeros(shape))
    boxes = cat("boxes", (0, 4)).astype(np.float32)
    n_obj = np.array([len(im["labels"]) for im in images], np.int64)
    labels = [None if lab is None else str(lab) for im in images for lab in im["labels"]]
    objs = pa.StructArray.from_arrays([pa.array(boxes[:, k]) for k in range(4)] + [
        pa.array(labels, pa.string()), pa.array(cat("scores", (0,)).astype(np.float32))], fields=list(OBJECT_TYPE))
    pairs = cat("pairs", (0, 2)).astype(np.int32)
    n_pairs = np.array([len(np.asarray(im.get("pairs", np.zeros((0, 2)))).reshape(-1, 2)) for im in images], np.int64)
    pair_arr = pa.StructArray.from_arrays([pa.array(pairs[:, 0]), pa.array(pairs[:, 1])], fields=list(PAIR_TYPE))
    flat = cat("pair_scores", (0, P)).astype(np.float32).reshape(-1)
    inner = pa.ListArray.from_arrays(pa.array((np.arange(n_pairs.sum() + 1) * P).astype(np.int32)),
                                     pa.array(flat), type=pa.list_(pa.float32()))
    tris = [t for im in images for t in im.get("triplets", [])]
    n_tri = np.array([len(im.get("triplets", [])) for im in images], np.int64)
    tri_arr = pa.StructArray.from_arrays([
        pa.array([int(t[0]) for t in tris], pa.int32()), pa.array([int(t[1]) for t in tris], pa.int32()),
        pa.array([str(t[2]) for t in tris], pa.string()), pa.array([float(t[3]) for t in tris], pa.float32()),
        pa.nulls(len(tris), pa.float32()), pa.nulls(len(tris), pa.float32())], fields=list(TRIPLET_TYPE))

    def lists(values, counts, type_):
        off = pa.array(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
        return pa.ListArray.from_arrays(off, values, type=pa.list_(type_))

    return pa.Table.from_arrays([pa.array([str(i) for i in ids], pa.string()), lists(objs, n_obj, OBJECT_TYPE),
                                 lists(pair_arr, n_pairs, PAIR_TYPE), lists(inner, n_pairs, pa.list_(pa.float32())),
                                 lists(tri_arr, n_tri, TRIPLET_TYPE)], schema=scene_graphs_schema(predicates))


def _ranked(n: int) -> np.ndarray:
    return 1.0 - np.arange(n) / max(n, 1)


# --------------------------------------------------------------------------- sgb

_ALLOWED = {"torch", "numpy", "collections", "_codecs", "copyreg"}


def _torch_load(path: str) -> Any:
    """torch.load of an SGB output without maskrcnn_benchmark: its classes become plain objects
    holding their attributes; anything outside tensors, numpy and containers is refused."""
    import pickle
    import types

    import torch

    class _Stand(object):
        """Stands in for a maskrcnn_benchmark class (BoxList): keeps the pickled attributes."""

    class _Unpickler(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            top = module.split(".")[0]
            if top == "maskrcnn_benchmark":
                return _Stand
            if top in _ALLOWED or (module == "builtins" and name in ("set", "frozenset", "slice", "complex")):
                return super().find_class(module, name)
            raise pickle.UnpicklingError(f"{path}: refusing to unpickle {module}.{name} (not an SGB output)")

    shim = types.SimpleNamespace(Unpickler=_Unpickler, load=pickle.load, __name__="relate_sgb_pickle")
    return torch.load(path, map_location="cpu", pickle_module=shim, weights_only=False)


def _arr(x: Any) -> np.ndarray:
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


def read_sgb(path: str, dicts: str) -> tuple[list[dict], list[str]]:
    """Per-image dicts (boxes, labels, scores, pairs, pair_scores) and the predicate list."""
    d = json.loads(Path(dicts).read_text())
    idx_to_label = {int(k): v for k, v in d["idx_to_label"].items()}
    idx_to_pred = {int(k): v for k, v in d["idx_to_predicate"].items()}
    predicates = [idx_to_pred[i] for i in sorted(idx_to_pred)]
    obj = _torch_load(path)
    preds = obj["predictions"] if isinstance(obj, dict) else obj
    images = []
    for i, b in enumerate(preds):
        f = getattr(b, "extra_fields", None)
        if f is None or "pred_rel_scores" not in f:
            raise SchemaError(f"{path}: prediction {i} is not an SGB relation BoxList (no extra_fields "
                              f"'pred_rel_scores'; have {sorted(f) if f else None})")
        box = _arr(b.bbox).astype(np.float64).reshape(-1, 4)
        if getattr(b, "mode", "xyxy") == "xywh":  # SGB's xywh spans w - 1 pixels
            box = np.concatenate([box[:, :2], box[:, :2] + box[:, 2:] - 1], axis=1)
        lab = _arr(f["pred_labels"]).astype(np.int64).reshape(-1)
        unknown = sorted(set(lab.tolist()) - set(idx_to_label))
        if unknown:
            raise SchemaError(f"{path}: prediction {i}: pred_labels {unknown[:5]} are not in {dicts}'s idx_to_label")
        rel = _arr(f["pred_rel_scores"]).astype(np.float32)
        if rel.ndim != 2 or rel.shape[1] != len(predicates) + 1:
            raise SchemaError(f"{path}: prediction {i}: pred_rel_scores has shape {rel.shape}; need (pairs, "
                              f"{len(predicates) + 1}): background + the {len(predicates)} predicates of {dicts}")
        images.append({"boxes": box, "labels": [idx_to_label[k] for k in lab.tolist()],
                       "scores": _arr(f["pred_scores"]).astype(np.float32).reshape(-1),
                       "pairs": _arr(f["rel_pair_idxs"]).astype(np.int64).reshape(-1, 2), "pair_scores": rel[:, 1:]})
    return images, predicates


# --------------------------------------------------------------------------- openpsg

def read_openpsg(folder: str, psg_json: str) -> tuple[list[dict], list[str]]:
    """Per-image dicts (boxes from the panoptic PNG, labels, triplets ranked by list order)."""
    from relate.data.readers.psg import segment_boxes

    doc = json.loads(Path(psg_json).read_text())
    classes = list(doc["thing_classes"]) + list(doc["stuff_classes"])
    predicates = list(doc["predicate_classes"])
    root = Path(folder)
    entries = json.loads((root / "relation.json").read_text())
    images = []
    for i, e in enumerate(entries):
        seg = e["segments_info"]
        cats = [int(s["category_id"]) for s in seg]
        bad = [c for c in cats if not 1 <= c <= len(classes)]
        rels = np.asarray(e["relations"], dtype=np.int64).reshape(-1, 3)
        badp = rels[(rels[:, 2] < 1) | (rels[:, 2] > len(predicates)), 2]
        if bad or badp.size:
            raise SchemaError(f"{root / 'relation.json'} entry {i}: category_id {bad[:3]} / predicate "
                              f"{badp[:3].tolist()} outside 1..{len(classes)} / 1..{len(predicates)} (1-based)")
        boxes = segment_boxes(root / "panseg" / e["pan_seg_file_name"], [int(s["id"]) for s in seg]) if seg \
            else np.zeros((0, 4))
        score = _ranked(len(rels))
        images.append({"boxes": boxes, "labels": [classes[c - 1] for c in cats], "scores": np.ones(len(seg), np.float32),
                       "triplets": [(s, o, predicates[p - 1], x) for (s, o, p), x in zip(rels.tolist(), score)]})
    return images, predicates


# --------------------------------------------------------------------------- vlm

def map_predicates(strings: Sequence[str], predicates: Sequence[str], embed, matcher) -> dict[str, str | None]:
    """Each distinct string -> the benchmark predicate it names: an exact (case- and space-
    insensitive) match, else the closest predicate whose cosine reaches the matcher's calibrated
    threshold, else None (unmapped)."""
    from relate.metrics.openvocab import _unit

    exact = {p.strip().lower(): p for p in predicates}
    out: dict[str, str | None] = {s: exact.get(s.strip().lower()) for s in strings}
    todo = [s for s, p in out.items() if p is None]
    if todo:
        ok = matcher.match_matrix(embed, todo, list(predicates), space=matcher.space)
        cos = _unit(embed(todo)) @ _unit(embed(list(predicates))).T
        cos = np.where(ok, cos, -np.inf)
        best = cos.argmax(axis=1)
        for s, j, row in zip(todo, best, cos):
            out[s] = predicates[j] if np.isfinite(row[j]) else None
    return out


def _vlm_lines(path: str) -> list[dict]:
    rows = []
    for n, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except ValueError as exc:
            raise SchemaError(f"{path} line {n}: not JSON: {exc}") from None
        if not isinstance(r, dict) or "image_id" not in r or not isinstance(r.get("triplets"), list):
            raise SchemaError(f"{path} line {n}: need an object with 'image_id' and a 'triplets' list")
        for t in r["triplets"]:
            if not isinstance(t, dict) or not {"subject", "object", "predicate"} <= set(t):
                raise SchemaError(f"{path} line {n} (image_id={r['image_id']!r}): a triplet needs subject, object "
                                  f"and predicate; got {t!r}")
        rows.append(r)
    return rows


def read_vlm(path: str, bench, embed, matcher) -> tuple[list[str], list[dict], dict]:
    """(image ids, per-image dicts with mapped sparse triplets, the mapping report)."""
    rows = _vlm_lines(path)
    gt = {r["image_id"]: r["boxes"] for r in bench.corpus.select(["image_id", "boxes"]).to_pylist()}
    counts = Counter(str(t["predicate"]) for r in rows for t in r["triplets"])
    mapping = map_predicates(sorted(counts), list(bench.predicates), embed, matcher)
    ids, images = [], []
    for r in rows:
        iid = str(r["image_id"])
        if "objects" in r:
            o = r["objects"]
            im = {"boxes": np.array([x["box"] for x in o], np.float64).reshape(-1, 4),
                  "labels": [x.get("label") for x in o], "scores": np.array([x.get("score", 1.0) for x in o])}
        elif iid in gt:  # predcls: the indices name the benchmark's own boxes
            b = gt[iid]
            im = {"boxes": np.array([[x["x1"], x["y1"], x["x2"], x["y2"]] for x in b]).reshape(-1, 4),
                  "labels": [x["category"] for x in b], "scores": np.ones(len(b))}
        else:
            raise SchemaError(f"{path}: image_id {iid!r} has no 'objects' and is not in the benchmark")
        rank = _ranked(len(r["triplets"]))
        im["triplets"] = [(t["subject"], t["object"], mapping[str(t["predicate"])], t.get("score", x))
                          for t, x in zip(r["triplets"], rank) if mapping[str(t["predicate"])] is not None]
        ids.append(iid)
        images.append(im)
    unmapped = {s: c for s, c in counts.most_common() if mapping[s] is None}
    report = {"threshold": matcher.threshold, "space": matcher.space, "n_triplets": sum(counts.values()),
              "n_unmapped_triplets": sum(unmapped.values()), "n_strings": len(counts),
              "unmapped": unmapped, "mapping": {s: p for s, p in mapping.items() if p is not None}}
    return ids, images, report


def _matcher(cfg: ConvertConfig):
    from eval_jobs.ovsgg import SynonymSpec, _embed_fn, _synonym_groups
    from relate.metrics.openvocab import SynonymMatcher, calibrate_synonym_threshold

    embed = _embed_fn(cfg.encoder)
    if cfg.threshold is not None:
        return embed, SynonymMatcher(cfg.threshold, cfg.encoder)
    groups = _synonym_groups(SynonymSpec(encoder=cfg.encoder, groups=cfg.synonym_groups))
    return embed, calibrate_synonym_threshold(embed, groups, space=cfg.encoder)


# --------------------------------------------------------------------------- job

def _image_ids(cfg: ConvertConfig, bench) -> list[str]:
    if cfg.image_ids:
        text = Path(cfg.image_ids).read_text()
        return [str(i) for i in json.loads(text)] if text.lstrip().startswith("[") else text.split()
    return bench.corpus.column("image_id").to_pylist()


def _score(cfg: ConvertConfig, bench) -> dict:
    from relate.metrics import evaluate_scene_graphs, load_ground_truth, load_scene_graphs

    gt = load_ground_truth(bench.corpus)
    sg = load_scene_graphs(cfg.out, gt)
    kw = {"predicates": list(bench.predicates)} if cfg.protocol == "sgb" else {}
    out = {}
    for gc, mode in ((True, "graph_constrained"), (False, "unconstrained")):
        r = evaluate_scene_graphs(gt, sg, ks=cfg.ks, graph_constrained=gc, protocol=cfg.protocol, **kw)
        out[mode] = {k: v for k, v in r.metrics.items() if k.split("@")[0] in ("R", "mR") or not "@" in k}
    return {"protocol": cfg.protocol, **out}


def main(cfg: ConvertConfig) -> dict:
    """Write ``cfg.out`` (and, for vlm, ``<out>.report.json``); returns what was written and, with
    ``score``, the recall of the file on the benchmark."""
    bench = None
    if cfg.benchmark_reader is not None:
        from eval_jobs.ovsgg import BenchmarkSpec, load_benchmark

        bench = load_benchmark(BenchmarkSpec(name="convert", axis="A1", reader=cfg.benchmark_reader,
                                             path=cfg.benchmark_path, split=cfg.split))
    report: dict | None = None
    if cfg.source_format == "vlm":
        embed, matcher = _matcher(cfg)
        ids, images, report = read_vlm(cfg.input, bench, embed, matcher)
        predicates = list(bench.predicates)
    else:
        images, predicates = (read_sgb(cfg.input, cfg.dicts) if cfg.source_format == "sgb"
                              else read_openpsg(cfg.input, cfg.psg_json))
        ids = _image_ids(cfg, bench)
        if len(ids) != len(images):
            raise SchemaError(f"{cfg.input}: {len(images)} images but the image order has {len(ids)} "
                              f"({cfg.image_ids or f'{cfg.benchmark_reader} {cfg.split}'}); they must align")
    table = scene_graphs_table(ids, images, predicates)
    validate_scene_graphs(table, name=cfg.out)
    Path(cfg.out).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, cfg.out)
    result: dict[str, Any] = {"out": cfg.out, "format": cfg.source_format, "images": table.num_rows,
                              "objects": sum(len(im["labels"]) for im in images),
                              "pairs": int(sum(len(np.asarray(im.get("pairs", [])).reshape(-1, 2)) for im in images)),
                              "triplets": sum(len(im.get("triplets", [])) for im in images)}
    if report is not None:
        Path(cfg.out + ".report.json").write_text(json.dumps(report, indent=1))
        result["unmapped"] = {"triplets": report["n_unmapped_triplets"], "strings": report["unmapped"]}
    if cfg.score:
        result["scores"] = _score(cfg, bench)
    return result


def parse_args(argv: Sequence[str] | None = None) -> ConvertConfig:
    """One flag per config field (``--from`` for source_format); values are read as JSON when they parse."""
    ap = argparse.ArgumentParser(prog="python -m eval_jobs.convert", description=__doc__.split("\n")[0])
    for name, field in ConvertConfig.model_fields.items():
        flag = "--from" if name == "source_format" else "--" + name.replace("_", "-")
        ap.add_argument(flag, dest=name, default=None, help=field.description)
    args = {k: v for k, v in vars(ap.parse_args(argv)).items() if v is not None}
    for k, v in args.items():
        if k in ("ks", "score", "threshold"):
            args[k] = json.loads(v)
    return ConvertConfig(**args)


if __name__ == "__main__":
    print(json.dumps(main(parse_args()), indent=1))
