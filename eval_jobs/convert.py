"""Convert other systems' saved scene-graph outputs into the scene-graphs layout, and score them.

    python -m eval_jobs.convert --from sgb --input eval_results.pytorch --dicts VG-SGG-dicts-with-attri.json \\
        --benchmark-reader vg150 --benchmark-path data/vg150 --out sgdet.parquet --score

Formats (``--from``):

* ``sgb``      Scene-Graph-Benchmark.pytorch's test output ``eval_results.pytorch`` (a dict whose
               ``predictions`` is one BoxList per test image, in the dataset's order) or a bare list
               of BoxLists. Per image: ``bbox`` (xyxy pixels of the original image), ``pred_labels``,
               ``pred_scores``, ``rel_pair_idxs`` and ``pred_rel_scores`` (column 0 = background,
               dropped); labels and predicates are named by the dataset's dicts JSON. The pair
               scores stay dense. The file is read by torch's weights-only loader (torch imported
               for this format only), with a stand-in for SGB's BoxList class.
* ``openpsg``  an OpenPSG submission folder: ``relation.json`` (per test image, in the dataset's
               order: ``relations`` [subject, object, predicate] ranked best first, ``segments_info``
               with 1-based ``category_id``, ``pan_seg_file_name``) and ``panseg/*.png``. Boxes are
               the segments' extents; predicates are 1-based into psg.json's ``predicate_classes``.
               It has no scores: rank r of n scores 1 - r / n, objects 1.
* ``openpsg-pkl``  OpenPSG's pickled test results (``tools/test.py --out results.pkl``): per image a
               Result with ``refine_bboxes`` (box + score), 1-based ``labels``, ``rel_pair_idxes`` and
               dense ``rel_dists`` (column 0 = no relation, dropped).
* ``vlm``      free-text triplets, JSON lines ``{"image_id", "triplets": [{"subject", "object",
               "predicate", "score"?}], "objects"?: [{"box": [x1, y1, x2, y2], "label", "score"}]}``;
               without ``objects`` the indices are the benchmark's GT boxes (predcls). Strings are
               mapped onto the benchmark's predicates in the text space at the calibrated synonym
               threshold (relate.metrics.openvocab); unmapped strings are dropped, counted and listed
               in ``<out>.report.json``, as are answers naming no usable pair (a box index the image
               lacks, a non-integer, subject == object). Without a score, position r of n scores 1 - r / n.

The image order of ``sgb`` and ``openpsg`` outputs is their dataset's: the benchmark reader (or
``--image-ids``) supplies the image_id of each position, and a count mismatch is an error.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Literal, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import Field, model_validator

from eval_jobs.convert_formats import read_openpsg, read_openpsg_pkl, read_sgb, read_vlm
from relate.config import StrictConfig
from relate.schema import (OBJECT_TYPE, PAIR_TYPE, SCENE_GRAPHS_ROW_GROUP, TRIPLET_TYPE, SchemaError,
                           scene_graphs_schema, validate_scene_graphs)

__all__ = ["ConvertConfig", "FORMATS", "main", "parse_args", "scene_graphs_table"]

FORMATS = ("sgb", "openpsg", "openpsg-pkl", "vlm")


class ConvertConfig(StrictConfig):
    source_format: Literal["sgb", "openpsg", "openpsg-pkl", "vlm"] = Field(description="format of --input "
                                                                           "(CLI: --from)")
    input: str = Field(description="the native output: eval_results.pytorch (sgb), the submission folder "
                                   "(openpsg), results.pkl (openpsg-pkl) or a JSON-lines file (vlm)")
    out: str = Field(description="scene-graphs Parquet to write (relate.schema SCENE_GRAPHS_SCHEMA)")
    benchmark_reader: str | None = Field(default=None, description="reader of the evaluated split ('parquet' for a "
                                         "CORPUS_SCHEMA file, or vg150, psg, ...): image order, GT boxes, predicates")
    benchmark_path: str | None = Field(default=None, description="the benchmark's native folder or corpus Parquet")
    split: str = Field(default="test", description="split the output was computed on")
    image_ids: str | None = Field(default=None, description="instead of a benchmark: the image_id of each output "
                                  "position (JSON list or one per line)")
    dicts: str | None = Field(default=None, description="sgb: the dataset's dicts JSON (idx_to_label, idx_to_predicate)")
    psg_json: str | None = Field(default=None, description="openpsg, openpsg-pkl: psg.json (thing_classes, stuff_classes, "
                                 "predicate_classes)")
    encoder: str = Field(default="minilm", description="vlm: text encoder whose space maps the strings")
    synonym_groups: str = Field(default="lexicon", description="vlm: synonym groups the threshold is calibrated on "
                                "('lexicon' or a JSON {group: [strings]} file)")
    threshold: float | None = Field(default=None, description="vlm: a fixed cosine threshold instead of calibrating")
    score: bool = Field(default=False, description="after writing, score the file on the benchmark (graph-"
                        "constrained and unconstrained) and add the metrics to the result")
    protocol: Literal["sgb", "paper"] = Field(default="sgb", description="protocol of --score, and the rules the "
                                              "benchmark's ground truth is read by (sgb: Scene-Graph-Benchmark's "
                                              "loader, whose image order an sgb output follows)")
    ks: list[int] = Field(default=[20, 50, 100], description="recall cut-offs of --score")
    require_category: bool | None = Field(default=None, description="--score under paper: unset scores object "
                                          "labels whenever the file carries them; false: label-agnostic (IoU "
                                          "alone); the result names which (object_labels). sgb: always labels")

    @model_validator(mode="after")
    def _needs(self) -> "ConvertConfig":
        has_bench = self.benchmark_reader is not None and self.benchmark_path is not None
        if (self.benchmark_reader is None) != (self.benchmark_path is None):
            raise ValueError("benchmark_reader and benchmark_path go together")
        if self.source_format == "sgb" and not self.dicts:
            raise ValueError("--from sgb needs --dicts (the dataset's idx_to_label / idx_to_predicate JSON)")
        if self.source_format.startswith("openpsg") and not self.psg_json:
            raise ValueError(f"--from {self.source_format} needs --psg-json (its class and predicate lists)")
        if self.source_format != "vlm" and not (has_bench or self.image_ids):
            raise ValueError(f"--from {self.source_format} needs the image order: a benchmark or --image-ids")
        if (self.source_format == "vlm" or self.score) and not has_bench:
            raise ValueError("--from vlm and --score need the benchmark (--benchmark-reader, --benchmark-path)")
        if self.protocol == "sgb" and self.require_category is False:
            raise ValueError("--require-category false (label-agnostic) is a paper option; sgb links boxes by label")
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


def _matcher(cfg: ConvertConfig):
    from eval_jobs.ovsgg_cells import embed_fn, synonym_groups
    from eval_jobs.ovsgg_config import SynonymSpec
    from relate.metrics.openvocab import SynonymMatcher, calibrate_synonym_threshold

    embed = embed_fn(cfg.encoder)
    if cfg.threshold is not None:
        return embed, SynonymMatcher(cfg.threshold, cfg.encoder)
    groups = synonym_groups(SynonymSpec(encoder=cfg.encoder, groups=cfg.synonym_groups))
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
    kw = ({"predicates": list(bench.predicates)} if cfg.protocol == "sgb"
          else {"require_category": cfg.require_category})
    out: dict[str, Any] = {}
    for gc, mode in ((True, "graph_constrained"), (False, "unconstrained")):
        r = evaluate_scene_graphs(gt, sg, ks=cfg.ks, graph_constrained=gc, protocol=cfg.protocol, **kw)
        out[mode] = {k: v for k, v in r.metrics.items() if k.split("@")[0] in ("R", "mR") or not "@" in k}
        out["object_labels"] = r.object_labels
    rows = bench.gt_rows()
    return {"protocol": cfg.protocol, **out, **({"gt_rows": rows} if rows is not None else {})}


def main(cfg: ConvertConfig) -> dict:
    """Write ``cfg.out`` (and, for vlm, ``<out>.report.json``); returns what was written and, with
    ``score``, the recall of the file on the benchmark."""
    bench = None
    if cfg.benchmark_reader is not None:
        from eval_jobs.ovsgg_cells import load_benchmark
        from eval_jobs.ovsgg_config import BenchmarkSpec

        # the protocol's loading rules: under sgb the image order and GT rows are SGB's own
        bench = load_benchmark(BenchmarkSpec(name="convert", axis="A1", reader=cfg.benchmark_reader,
                                             path=cfg.benchmark_path, split=cfg.split), cfg.protocol)
    report: dict | None = None
    if cfg.source_format == "vlm":
        embed, matcher = _matcher(cfg)
        ids, images, report = read_vlm(cfg.input, bench, embed, matcher)
        predicates = list(bench.predicates)
    else:
        images, predicates = (read_sgb(cfg.input, cfg.dicts) if cfg.source_format == "sgb"
                              else read_openpsg(cfg.input, cfg.psg_json) if cfg.source_format == "openpsg"
                              else read_openpsg_pkl(cfg.input, cfg.psg_json))
        ids = _image_ids(cfg, bench)
        if len(ids) != len(images):
            raise SchemaError(f"{cfg.input}: {len(images)} images but the image order has {len(ids)} "
                              f"({cfg.image_ids or f'{cfg.benchmark_reader} {cfg.split}'}); they must align")
    table = scene_graphs_table(ids, images, predicates)
    validate_scene_graphs(table, name=cfg.out)
    Path(cfg.out).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, cfg.out, row_group_size=SCENE_GRAPHS_ROW_GROUP)
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
    """One flag per config field (``--from`` for source_format; ``--score`` is a switch, ``--ks``
    a comma-separated list); a missing or bad value exits with the field's message."""
    from pydantic import ValidationError

    ap = argparse.ArgumentParser(prog="python -m eval_jobs.convert", description=__doc__.split("\n")[0])
    for name, field in ConvertConfig.model_fields.items():
        flag = "--from" if name == "source_format" else "--" + name.replace("_", "-")
        if field.annotation is bool:
            ap.add_argument(flag, dest=name, action="store_const", const=True, default=None, help=field.description)
        else:
            ap.add_argument(flag, dest=name, default=None, help=field.description)
    args = {k: v for k, v in vars(ap.parse_args(argv)).items() if v is not None}
    if "ks" in args:
        args["ks"] = [int(k) for k in str(args["ks"]).strip("[]").split(",") if k.strip()]
    try:
        return ConvertConfig(**args)
    except ValidationError as exc:
        ap.error("; ".join(f"{'.'.join(map(str, e['loc'])) or 'config'}: {e['msg']}" for e in exc.errors()))


if __name__ == "__main__":
    print(json.dumps(main(parse_args()), indent=1))
