"""Convert other systems' saved scene-graph outputs into the scene-graphs layout, and score them.

    python -m eval_jobs.convert --from sgb --input eval_results.pytorch --dicts VG-SGG-dicts-with-attri.json \\
        --benchmark-reader vg150 --benchmark-path data/vg150 --out sgdet.parquet --score

Formats (``--from``):

* ``sgb``      Scene-Graph-Benchmark.pytorch's test output ``eval_results.pytorch`` (a dict whose
               ``predictions`` is one BoxList per test image, in the dataset's order) or a bare list
               of BoxLists; or, for a split too large for one file (VG150 sgdet: 26,446 images x
               6,320 pairs x 51 scores, 34 GB), a folder of shards each saved the same way (or one
               BoxList per file), whose name order (digits compared as numbers) is the image order.
               Read and written a chunk of images at a time (zip-format files memory-mapped), so
               no step holds the split. Per image: ``bbox`` (xyxy pixels of the original image), ``pred_labels``,
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

With ``--score`` under ``sgb``, a dense file (sgb, openpsg-pkl) is scored one row group at a time
(relate.metrics.sgb_stream; ``--score-workers`` > 0 spreads them over Ray tasks) and its per-image
rows go to ``<out stem>.per_image.parquet`` (PER_IMAGE_SCHEMA): the same rows and totals as
scoring the file whole.

``--score --only-score`` (sgb) scores SGB's files without writing the converted copy: each file is
read, validated as its table would be and ranked in both modes by a forked reading process (one
per core, ``--read-workers``; a single ``eval_results.pytorch`` is read here), which sends back a
few KB per image (its detections and the entries ranked within the largest K); this process
credits them against the ground truth in file order. The totals and per-image rows are those of
converting and scoring.

The image order of ``sgb`` and ``openpsg`` outputs is their dataset's: the benchmark reader (or
``--image-ids``) supplies the image_id of each position, and a count mismatch is an error.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
from collections import deque
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator, Literal, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import Field, model_validator

from eval_jobs.convert_formats import iter_sgb, read_openpsg, read_openpsg_pkl, read_vlm, sgb_dicts, sgb_files
from relate.config import StrictConfig
from relate.schema import (OBJECT_TYPE, PAIR_TYPE, PER_IMAGE_SCHEMA, SCENE_GRAPHS_ROW_GROUP, TRIPLET_TYPE,
                           SchemaError, scene_graphs_schema, to_table, validate_scene_graphs)

__all__ = ["ConvertConfig", "FORMATS", "main", "parse_args", "scene_graphs_table"]

FORMATS = ("sgb", "openpsg", "openpsg-pkl", "vlm")


class ConvertConfig(StrictConfig):
    source_format: Literal["sgb", "openpsg", "openpsg-pkl", "vlm"] = Field(description="format of --input "
                                                                           "(CLI: --from)")
    input: str = Field(description="the native output: eval_results.pytorch or a folder of its shards (sgb), the "
                                   "submission folder "
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

    chunk_scores: int = Field(default=1 << 24, ge=1, description="sgb: pair scores converted at a time; each chunk "
                              "of images (about this many scores, 64 MB in float32) is one row group of --out")
    score_workers: int = Field(default=0, ge=0, description="--score under sgb on a dense file: Ray tasks scoring "
                               "its row groups in parallel (0: one after another in this process)")
    only_score: bool = Field(default=False, description="sgb with --score: score the output as it is read and write "
                             "only the totals and the per-image rows (<out stem>.per_image.parquet), not the "
                             "converted scene graphs (an sgdet split's are 34 GB)")
    read_workers: int | None = Field(default=None, ge=1, description="--only-score on a folder of shards: processes "
                                     "reading, validating and ranking its files in parallel (one file each at a time; "
                                     "crediting stays here); unset: the cores this process may use")

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
        if self.only_score and not (self.source_format == "sgb" and self.score and self.protocol == "sgb"
                                    and self.score_workers == 0):
            raise ValueError("--only-score is for --from sgb with --score under protocol sgb, in this process "
                             "(no --score-workers)")
        if self.protocol == "sgb" and self.require_category is False:
            raise ValueError("--require-category false (label-agnostic) is a paper option; sgb links boxes by label")
        return self


# --------------------------------------------------------------------------- writing

def scene_graphs_table(ids: Sequence[str], images: Sequence[dict], predicates: Sequence[str]) -> pa.Table:
    """One row per image from dicts of numpy arrays: ``boxes`` (n, 4), ``labels`` (n,), ``scores``
    (n,), optional ``pairs`` (m, 2) with ``pair_scores`` (m, P), optional ``triplets`` (list of
    (subject, object, predicate, score)). Arrays are concatenated, not turned into Python rows."""
    return _table_of(ids, _concat_images(images, len(predicates)), predicates)


def _concat_images(images: Sequence[dict], P: int, score_buffer: list | None = None) -> dict:
    """The images' arrays concatenated in the file's dtypes, with the per-image counts. With
    ``score_buffer`` (a one-item list, empty at first) the pair scores go into the array it holds,
    grown when too small and reused by the next call: fresh memory costs a page fault per 4 KB on
    first touch, as much as the copy itself on a loaded machine (an sgdet chunk is 64 MB)."""
    def cat(key: str, shape: tuple, dtype, buffer: list | None = None) -> np.ndarray:
        # one copy of each array, straight into the column's dtype
        parts = [np.asarray(im[key]).reshape((-1,) + shape[1:]) if key in im else np.zeros(shape, dtype)
                 for im in images]
        if not parts:
            return np.zeros(shape, dtype)
        if buffer is None:
            return np.concatenate(parts, dtype=dtype, casting="unsafe")
        n = sum(len(x) for x in parts)
        if not buffer or buffer[0].shape[0] < n:
            buffer[:] = [np.empty((n,) + shape[1:], dtype)]
        return np.concatenate(parts, out=buffer[0][:n], casting="unsafe")

    return {"boxes": cat("boxes", (0, 4), np.float32), "scores": cat("scores", (0,), np.float32),
            "n_objects": np.array([len(im["labels"]) for im in images], np.int64),
            "labels": [None if lab is None else str(lab) for im in images for lab in im["labels"]],
            "pairs": cat("pairs", (0, 2), np.int32), "pair_scores": cat("pair_scores", (0, P), np.float32, score_buffer),
            "n_pairs": np.array([len(np.asarray(im.get("pairs", np.zeros((0, 2)))).reshape(-1, 2)) for im in images],
                                np.int64),
            "triplets": [im.get("triplets", []) for im in images]}


def _table_of(ids: Sequence[str], a: dict, predicates: Sequence[str]) -> pa.Table:
    boxes, pairs, n_pairs = a["boxes"], a["pairs"], a["n_pairs"]
    objs = pa.StructArray.from_arrays([pa.array(boxes[:, k]) for k in range(4)] + [
        pa.array(a["labels"], pa.string()), pa.array(a["scores"])], fields=list(OBJECT_TYPE))
    pair_arr = pa.StructArray.from_arrays([pa.array(pairs[:, 0]), pa.array(pairs[:, 1])], fields=list(PAIR_TYPE))
    P = len(predicates)
    inner = pa.ListArray.from_arrays(pa.array((np.arange(n_pairs.sum() + 1) * P).astype(np.int32)),
                                     pa.array(a["pair_scores"].reshape(-1)), type=pa.list_(pa.float32()))
    tris = [t for im_tris in a["triplets"] for t in im_tris]
    n_tri = np.array([len(t) for t in a["triplets"]], np.int64)
    tri_arr = pa.StructArray.from_arrays([
        pa.array([int(t[0]) for t in tris], pa.int32()), pa.array([int(t[1]) for t in tris], pa.int32()),
        pa.array([str(t[2]) for t in tris], pa.string()), pa.array([float(t[3]) for t in tris], pa.float32()),
        pa.nulls(len(tris), pa.float32()), pa.nulls(len(tris), pa.float32())], fields=list(TRIPLET_TYPE))

    def lists(values, counts, type_):
        off = pa.array(np.concatenate([[0], np.cumsum(counts)]).astype(np.int32))
        return pa.ListArray.from_arrays(off, values, type=pa.list_(type_))

    return pa.Table.from_arrays([pa.array([str(i) for i in ids], pa.string()), lists(objs, a["n_objects"], OBJECT_TYPE),
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


DENSE_FORMATS = ("sgb", "openpsg-pkl")


def _score(cfg: ConvertConfig, bench, inline: "_InlineSgb | None" = None) -> dict:
    from relate.metrics import evaluate_scene_graphs, load_ground_truth, load_scene_graphs

    gt = inline.gt if inline is not None else load_ground_truth(bench.corpus)
    rows = bench.gt_rows()
    extra = {"gt_rows": rows} if rows is not None else {}
    keep = lambda m: {k: v for k, v in m.items() if k.split("@")[0] in ("R", "mR") or "@" not in k}  # noqa: E731
    if cfg.protocol == "sgb" and cfg.source_format in DENSE_FORMATS:
        results = (inline.results() if inline is not None
                   else _score_sgb_stream(cfg, gt, list(bench.predicates)))
        per_image = str(Path(cfg.out).with_suffix(".per_image.parquet"))
        _write_per_image(cfg, results, per_image)
        return {"protocol": "sgb", **{mode: keep(r.metrics) for mode, r in results.items()},
                "object_labels": "scored", "per_image": per_image, **extra}
    sg = load_scene_graphs(cfg.out, gt)
    kw = ({"predicates": list(bench.predicates)} if cfg.protocol == "sgb"
          else {"require_category": cfg.require_category})
    out: dict[str, Any] = {}
    for gc, mode in ((True, "graph_constrained"), (False, "unconstrained")):
        r = evaluate_scene_graphs(gt, sg, ks=cfg.ks, graph_constrained=gc, protocol=cfg.protocol, **kw)
        out[mode] = keep(r.metrics)
        out["object_labels"] = r.object_labels
    return {"protocol": cfg.protocol, **out, **extra}


def _score_sgb_stream(cfg: ConvertConfig, gt, predicates: list[str]) -> dict:
    """Both modes of ``cfg.out`` under sgb, row group by row group: in this process, or in
    ``score_workers`` Ray tasks each given a contiguous run of row groups and the ground truth
    (put once in the object store); partials of disjoint images combine in any order."""
    from relate.metrics.sgb_stream import evaluate_sgb_stream, sgb_stream_results

    if cfg.score_workers == 0:
        return evaluate_sgb_stream(gt, cfg.out, ks=cfg.ks, predicates=predicates)
    import ray

    n_groups = pq.ParquetFile(cfg.out).num_row_groups
    bounds = np.linspace(0, n_groups, min(cfg.score_workers, max(n_groups, 1)) + 1).astype(int)
    task = ray.remote(_score_row_groups)
    gt_ref = ray.put(gt)
    refs = [task.remote(cfg.out, gt_ref, int(a), int(b), list(cfg.ks), predicates)
            for a, b in zip(bounds[:-1], bounds[1:]) if b > a]
    return sgb_stream_results(gt, [p for part in ray.get(refs) for p in part], ks=cfg.ks, predicates=predicates)


def _score_row_groups(path: str, gt, first: int, stop: int, ks: list[int], predicates: list[str]) -> list:
    """One Ray task's share: the SgbPartial of each row group in [first, stop)."""
    from relate.metrics.sgb_stream import sgb_partial

    pf = pq.ParquetFile(path)
    return [sgb_partial(gt, pf.read_row_group(g), ks=ks, predicates=predicates) for g in range(first, stop)]


def _write_per_image(cfg: ConvertConfig, results: dict, path: str) -> None:
    rows = [{"system": Path(cfg.out).stem, "benchmark": f"{cfg.benchmark_reader}:{cfg.split}", "axis": "A1",
             "protocol": "sgb", "mode": mode, "matcher": r.matcher, "box_source": "objects", **row}
            for mode, r in results.items() for row in (r.per_image or [])]
    pq.write_table(to_table(rows, PER_IMAGE_SCHEMA, table=path), path)


class _InlineSgb:
    """``--score`` under sgb in this process: each chunk is scored from the arrays it was just
    written from (validated as a table first), so the file is never read back and its score lists
    never copied again; what is kept per chunk is an SgbPartial, the size of its images' ground
    truth. The totals and per-image rows are those of scoring the written file."""

    def __init__(self, cfg: ConvertConfig, bench) -> None:
        from relate.metrics import load_ground_truth

        self.cfg, self.predicates = cfg, list(bench.predicates)
        self.gt = load_ground_truth(bench.corpus)
        self.index = self.gt.index_of()
        self.partials: list = []

    def rows(self, ids: Sequence[str]) -> np.ndarray:
        unknown = [i for i in ids if i not in self.index]
        if unknown:
            raise SchemaError(f"{self.cfg.out}: image_id(s) not in the ground truth: {unknown[:5]} "
                              f"({len(unknown)} in all)")
        return np.array([self.index[i] for i in ids], np.int64)

    def add_ranked(self, ids: Sequence[str], ranked) -> None:
        """Credit a chunk ranked elsewhere (relate.metrics.sgb_stream.SgbRanked) whose images are ``ids``."""
        from relate.metrics.sgb_stream import sgb_partial_of_ranked

        self.partials.append(sgb_partial_of_ranked(self.gt, self.rows(ids), ranked, predicates=self.predicates))

    def __call__(self, ids: Sequence[str], a: dict, columns: Sequence[str]) -> None:
        from relate.metrics.sgb_stream import scene_graphs_of_arrays, sgb_partial_of

        rows = self.rows(ids)
        sg = scene_graphs_of_arrays(self.gt, rows, a["n_objects"], a["boxes"], a["labels"], a["scores"], a["n_pairs"],
                                    a["pairs"], a["pair_scores"], columns, name=self.cfg.out)
        self.partials.append(sgb_partial_of(self.gt, sg, rows, ks=self.cfg.ks, predicates=self.predicates))

    def results(self) -> dict:
        from relate.metrics.sgb_stream import sgb_stream_results

        return sgb_stream_results(self.gt, self.partials, ks=self.cfg.ks, predicates=self.predicates)


def _leaf_paths(type_: pa.DataType, path: str) -> list[str]:
    """Parquet's column paths of an Arrow field (lists nest as ``list.element``)."""
    if pa.types.is_struct(type_):
        return [p for f in type_ for p in _leaf_paths(f.type, f"{path}.{f.name}")]
    if pa.types.is_list(type_):
        return _leaf_paths(type_.value_type, f"{path}.list.element")
    return [path]


_SCORE_COLUMN = "pair_scores.list.element.list.element"


def _sgb_writer_options(schema: pa.Schema) -> dict:
    """ParquetWriter options for an sgdet output: its pair scores (95% of the bytes) are written
    byte-stream-split and uncompressed, with no dictionary attempt (float scores barely compress,
    and compressing them doubled the write time); strings keep dictionaries, the rest snappy."""
    leaves = [p for f in schema for p in _leaf_paths(f.type, f.name)]
    strings = ["image_id", "objects.list.element.label", "triplets.list.element.predicate"]
    return {"compression": {p: ("none" if p == _SCORE_COLUMN else "snappy") for p in leaves},
            "use_dictionary": strings, "column_encoding": {_SCORE_COLUMN: "BYTE_STREAM_SPLIT"}}


def _write_sgb(cfg: ConvertConfig, bench, inline: _InlineSgb | None = None) -> dict:
    """Convert an SGB output chunk by chunk into ``cfg.out`` (one row group per chunk), through a
    ``.partial`` file that is renamed only once every image is in and the count matches; with
    ``inline``, each validated chunk is scored before it is written."""
    ids = _image_ids(cfg, bench)
    predicates = sgb_dicts(cfg.dicts)[1]
    final, tmp = Path(cfg.out), Path(cfg.out + ".partial")
    final.parent.mkdir(parents=True, exist_ok=True)
    counts = {"images": 0, "objects": 0, "pairs": 0, "triplets": 0}

    try:
        schema = scene_graphs_schema(predicates)
        # a second thread validates each chunk while this one scores it, then writes it (pyarrow
        # and numpy release the GIL) while this one reads the next: on two cores the halves overlap.
        # Two score buffers alternate: a chunk's is reused once its write is done.
        with pq.ParquetWriter(tmp, schema, **_sgb_writer_options(schema)) as writer, \
                ThreadPoolExecutor(1, thread_name_prefix="sgb-write") as pool:
            buffers: list[list] = [[], []]
            writing = None
            for k, chunk in enumerate(iter_sgb(cfg.input, cfg.dicts, cfg.chunk_scores)):
                pos = counts["images"]
                if pos + len(chunk) > len(ids):
                    raise _mismatch(cfg, _count_sgb(cfg), len(ids))
                arrays = _concat_images(chunk, len(predicates), buffers[k % 2])
                table = _table_of(ids[pos:pos + len(chunk)], arrays, predicates)
                checked = pool.submit(validate_scene_graphs, table, name=cfg.out)  # after the previous write
                if inline is not None:
                    try:
                        inline(ids[pos:pos + len(chunk)], arrays, predicates)
                    except Exception:
                        checked.result()  # a chunk that fails validation: its SchemaError, naming the value
                        raise
                checked.result()
                if writing is not None:
                    writing.result()
                writing = pool.submit(writer.write_table, table, row_group_size=SCENE_GRAPHS_ROW_GROUP)
                counts["images"] += len(chunk)
                counts["objects"] += sum(len(im["labels"]) for im in chunk)
                counts["pairs"] += sum(len(im["pairs"]) for im in chunk)
            if writing is not None:
                writing.result()
        if counts["images"] != len(ids):
            raise _mismatch(cfg, counts["images"], len(ids))
        tmp.replace(final)
    finally:
        tmp.unlink(missing_ok=True)
    return {"out": cfg.out, "format": "sgb", **counts}


def _only_score_sgb(cfg: ConvertConfig, bench, inline: _InlineSgb) -> dict:
    """``--only-score``: the SGB output is validated (as the table convert would write) and ranked
    chunk by chunk where it is read, in ``read_workers`` processes over a folder's files; this
    process credits each ranked chunk against the ground truth in file order and keeps only the
    partial scores. At most two files per worker are in flight, so memory is bounded by files,
    not by the split."""
    # imported once here and inherited by the forked readers (pyarrow loads pandas on its first
    # array of Python strings: 0.3 s a reader otherwise)
    import pandas  # noqa: F401
    import torch  # noqa: F401

    ids = _image_ids(cfg, bench)
    files = [str(f) for f in sgb_files(cfg.input)]
    Path(cfg.out).parent.mkdir(parents=True, exist_ok=True)  # where the per-image rows go
    workers = min(cfg.read_workers or len(os.sched_getaffinity(0)), len(files))
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        workers = 1  # a process connected to Ray is not forked: its shards are read here
    args = (cfg.dicts, inline.predicates, list(cfg.ks), cfg.chunk_scores)
    counts = {"images": 0, "objects": 0, "pairs": 0, "triplets": 0}

    def credit(ranked) -> None:
        pos, n = counts["images"], len(ranked.n_objects)
        if pos + n > len(ids):
            raise _mismatch(cfg, _count_sgb(cfg), len(ids))
        inline.add_ranked(ids[pos:pos + n], ranked)
        counts["images"] += n
        counts["objects"] += int(ranked.n_objects.sum())
        counts["pairs"] += int(ranked.n_pairs.sum())

    if workers <= 1:
        for f in files:
            for ranked in _rank_sgb_chunks(f, *args):
                credit(ranked)
    else:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
            pending: deque = deque()
            try:
                for f in files:
                    pending.append(pool.submit(_rank_sgb_file, f, *args))
                    while len(pending) > 2 * workers:
                        for ranked in pending.popleft().result():
                            credit(ranked)
                while pending:
                    for ranked in pending.popleft().result():
                        credit(ranked)
            except BaseException:
                pool.shutdown(cancel_futures=True)
                raise
    if counts["images"] != len(ids):
        raise _mismatch(cfg, counts["images"], len(ids))
    return {"out": None, "format": "sgb", "only_score": True, "read_workers": max(workers, 1), **counts}


def _rank_sgb_chunks(path: str, dicts: str, label_set: list[str], ks: list[int], chunk_scores: int) -> Iterator:
    """Each chunk of one SGB output file validated and ranked in both modes (SgbRanked)."""
    from relate.metrics.sgb_stream import sgb_rank_arrays

    columns = sgb_dicts(dicts)[1]
    buffer: list = []  # one score matrix, reused: fresh pages cost as much as the copy
    pos = 0
    for chunk in iter_sgb(path, dicts, chunk_scores):
        a = _concat_images(chunk, len(columns), buffer)
        names = [f"{Path(path).name}[{pos + i}]" for i in range(len(chunk))]  # what an error names
        validate_scene_graphs(_table_of(names, a, columns), name=path)
        yield sgb_rank_arrays(a["n_objects"], a["boxes"], a["labels"], a["scores"], a["n_pairs"], a["pairs"],
                              a["pair_scores"], columns, label_set=label_set, ks=ks, name=path)
        pos += len(chunk)


def _rank_sgb_file(path: str, dicts: str, label_set: list[str], ks: list[int], chunk_scores: int) -> list:
    """A reading process's unit: :func:`_rank_sgb_chunks` of one file (a few KB per image)."""
    return list(_rank_sgb_chunks(path, dicts, label_set, ks, chunk_scores))


def _mismatch(cfg: ConvertConfig, n: int, n_ids: int) -> SchemaError:
    return SchemaError(f"{cfg.input}: {n} images but the image order has {n_ids} "
                       f"({cfg.image_ids or f'{cfg.benchmark_reader} {cfg.split}'}); they must align")


def _count_sgb(cfg: ConvertConfig) -> int:
    """How many images the output holds (read again, only to word the mismatch error)."""
    return sum(len(chunk) for chunk in iter_sgb(cfg.input, cfg.dicts))


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
    if cfg.source_format == "sgb":  # streamed: a full sgdet split never fits in memory
        inline = (_InlineSgb(cfg, bench) if cfg.score and cfg.protocol == "sgb" and cfg.score_workers == 0
                  else None)
        result = _only_score_sgb(cfg, bench, inline) if cfg.only_score else _write_sgb(cfg, bench, inline)
        if cfg.score:
            result["scores"] = _score(cfg, bench, inline)
        return result
    if cfg.source_format == "vlm":
        embed, matcher = _matcher(cfg)
        ids, images, report = read_vlm(cfg.input, bench, embed, matcher)
        predicates = list(bench.predicates)
    else:
        images, predicates = (read_openpsg(cfg.input, cfg.psg_json) if cfg.source_format == "openpsg"
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
