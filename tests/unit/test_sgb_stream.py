"""Streaming ``sgb`` scoring (relate.metrics.sgb_stream) equals scoring the same file whole.

Random sgdet-like outputs with what makes the protocol's corners: tied scores, repeated GT rows,
images without GT relations or without a single pair, a predicate outside the label set, file rows
out of GT order. Equality is exact (==, NaN equal to NaN): every number is per image, and the
totals come from the same aggregation, so no tolerance is needed or allowed.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from _rows import box as _box, img as _img, rel as _rel
from relate.metrics import evaluate_scene_graphs, load_ground_truth, load_scene_graphs
from relate.metrics.sgb_stream import (evaluate_sgb_stream, scene_graph_batches, sgb_partial, sgb_partial_of_ranked,
                                       sgb_rank_arrays, sgb_stream_results)
from relate.schema import CORPUS_SCHEMA, scene_graphs_schema, to_table

CATS = ["man", "horse", "hat", "tree"]
LABEL_SET = ["on", "near", "has", "wears", "under"]      # "under" never in GT: mR divides by 5
FILE_PREDICATES = ["on", "near", "has", "wears", "under", "beside"]  # "beside": outside, not scored
KS = (1, 3, 10)


def _random_case(n: int, seed: int) -> tuple[pa.Table, pa.Table]:
    rng = np.random.default_rng(seed)
    images, sg_rows = [], []
    for i in range(n):
        nb = int(rng.integers(2, 6))
        xy = rng.uniform(0, 60, (nb, 2))
        wh = rng.uniform(5, 40, (nb, 2))
        cats = rng.choice(CATS, nb)
        boxes = [_box(*map(float, (x, y, x + w, y + h)), str(c)) for (x, y), (w, h), c in zip(xy, wh, cats)]
        rels = []
        if i % 7 != 3:  # some images carry no GT relation
            for _ in range(int(rng.integers(1, 5))):
                s, o = rng.choice(nb, 2, replace=False)
                rels.append(_rel(int(s), int(o), str(rng.choice(LABEL_SET[:4]))))
            rels.append(dict(rels[0]))  # an exact repeat: sgb counts it twice
        images.append(_img(f"im{i:03d}", boxes, rels))
        nd = 0 if i % 11 == 5 else nb + int(rng.integers(0, 3))  # some images without a single detection
        src = rng.integers(0, nb, nd)
        det = np.array([[b["x1"], b["y1"], b["x2"], b["y2"]] for b in boxes])[src] + rng.normal(0, 2, (nd, 4))
        det[:, 2:] = np.maximum(det[:, 2:], det[:, :2] + 1)
        labels = np.where(rng.random(nd) < .8, cats[src], rng.choice(CATS, nd))
        pairs = [(a, b) for a in range(nd) for b in range(nd) if a != b]
        # eighths: many exact ties in the ranking, which must break the same way in both paths
        scores = (rng.integers(0, 8, (len(pairs), len(FILE_PREDICATES))) / 8).astype(np.float32)
        for r in rels:  # most true relations get a top score on the pairs of their boxes' detections
            for j, (a, b) in enumerate(pairs):
                if src[a] == r["subject"] and src[b] == r["object"] and rng.random() < .7:
                    scores[j, LABEL_SET.index(r["predicate"])] = 1.0
        sg_rows.append({"image_id": f"im{i:03d}",
                        "objects": [{"x1": float(a), "y1": float(b), "x2": float(c), "y2": float(d), "label": str(lab),
                                     "score": float(sc)}
                                    for (a, b, c, d), lab, sc in zip(det, labels, rng.integers(1, 5, nd) / 4)],
                        "pairs": [{"subject": int(a), "object": int(b)} for a, b in pairs],
                        "pair_scores": scores.tolist(), "triplets": []})
    order = rng.permutation(n)  # the file lists images out of GT order
    return (to_table(images, CORPUS_SCHEMA),
            pa.Table.from_pylist([sg_rows[j] for j in order], schema=scene_graphs_schema(FILE_PREDICATES)))


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _whole(corpus: pa.Table, table: pa.Table) -> dict:
    gt = load_ground_truth(corpus)
    sg = load_scene_graphs(table, gt)
    out = {}
    for gc, mode in ((True, "graph_constrained"), (False, "unconstrained")):
        r = evaluate_scene_graphs(gt, sg, ks=KS, graph_constrained=gc, protocol="sgb", predicates=LABEL_SET,
                                  per_image=True)
        out[mode] = r
    return out


@pytest.mark.parametrize("seed", [0, 1])
def test_streamed_rows_and_totals_equal_the_whole_file(tmp_path, seed):
    corpus, table = _random_case(40, seed)
    path = tmp_path / "sg.parquet"
    pq.write_table(table, path, row_group_size=3)  # 14 row groups of 3 images (the last of 1)
    gt = load_ground_truth(corpus)
    stream = evaluate_sgb_stream(gt, path, ks=KS, predicates=LABEL_SET)
    whole = _whole(corpus, table)
    for mode in ("graph_constrained", "unconstrained"):
        s, w = stream[mode], whole[mode]
        assert _same(s.metrics, w.metrics), mode
        assert _same(s.per_predicate, w.per_predicate) and s.support == w.support and s.n_cls == w.n_cls
        assert _same(s.per_image, [{k: v for k, v in row.items() if k != "box_source"} for row in w.per_image])
        assert s.metrics["n_unscored_triplets"] > 0  # the "beside" column was seen and left out
        assert 0 < s.metrics["R@3"] < s.metrics["R@10"] < 1  # a case where the ranking decides
    # the per-image rows add up to the totals the way SGB averages: R@K over the rows, mR@K over the label set
    rows = [r for r in stream["graph_constrained"].per_image if r["k"] == 3]
    assert stream["graph_constrained"].metrics["R@3"] == float(np.mean([r["recall"] for r in rows]))
    per_pred = {p: [t["hits"] / t["n_gt"] for r in rows for t in r["predicates"] if t["predicate"] == p]
                for p in LABEL_SET}
    mR = sum(float(np.mean(v)) if v else 0.0 for v in per_pred.values()) / len(LABEL_SET)
    assert stream["graph_constrained"].metrics["mR@3"] == pytest.approx(mR, abs=1e-12)


@pytest.mark.parametrize("seed", [2, 3])
def test_ranked_where_read_and_credited_here_equals_the_whole_file(seed):
    # --only-score's split: a reader ranks a batch's arrays with no ground truth (sgb_rank_arrays),
    # the job credits what comes back (sgb_partial_of_ranked). Batches of 4 images, ties in eighths,
    # a column outside the label set, images without detections: the whole file's numbers.
    corpus, table = _random_case(30, seed)
    gt = load_ground_truth(corpus)
    index = gt.index_of()
    parts = []
    for lo in range(0, table.num_rows, 4):
        rows = table.slice(lo, 4).to_pylist()
        objs = [o for r in rows for o in r["objects"]]
        pairs = np.array([(p["subject"], p["object"]) for r in rows for p in r["pairs"]], np.int64).reshape(-1, 2)
        scores = np.array([v for r in rows for v in r["pair_scores"]], np.float32).reshape(-1, len(FILE_PREDICATES))
        ranked = sgb_rank_arrays([len(r["objects"]) for r in rows],
                                 np.array([[o[k] for k in ("x1", "y1", "x2", "y2")] for o in objs]).reshape(-1, 4),
                                 [o["label"] for o in objs], [o["score"] for o in objs], [len(r["pairs"]) for r in rows],
                                 pairs, scores, FILE_PREDICATES, label_set=LABEL_SET, ks=KS)
        assert set(ranked.entries) == {True, False} and ranked.entries[True][4].max(initial=0) < max(KS)
        parts.append(sgb_partial_of_ranked(gt, [index[r["image_id"]] for r in rows], ranked, predicates=LABEL_SET))
    got = sgb_stream_results(gt, parts[::-1], ks=KS, predicates=LABEL_SET)
    whole = _whole(corpus, table)
    for mode in ("graph_constrained", "unconstrained"):
        assert _same(got[mode].metrics, whole[mode].metrics), mode
        assert _same(got[mode].per_image, [{k: v for k, v in row.items() if k != "box_source"}
                                           for row in whole[mode].per_image])
        assert got[mode].metrics["n_unscored_triplets"] > 0 and 0 < got[mode].metrics["R@3"] < 1


def test_batches_split_large_row_groups_and_partials_combine_in_any_order(tmp_path):
    corpus, table = _random_case(25, 2)
    path = tmp_path / "sg.parquet"
    pq.write_table(table, path)  # one row group, larger than the byte budget below
    gt = load_ground_truth(corpus)
    group_bytes = pq.ParquetFile(path).metadata.row_group(0).total_byte_size
    batches = list(scene_graph_batches(path, max_bytes=group_bytes // 6))
    assert len(batches) >= 4 and sum(b.num_rows for b in batches) == 25
    parts = [sgb_partial(gt, b, ks=KS, predicates=LABEL_SET) for b in batches]
    backwards = sgb_stream_results(gt, parts[::-1], ks=KS, predicates=LABEL_SET)
    whole = _whole(corpus, table)
    for mode, r in backwards.items():
        assert _same(r.metrics, whole[mode].metrics)


def test_an_image_in_two_batches_is_refused(tmp_path):
    corpus, table = _random_case(6, 3)
    gt = load_ground_truth(corpus)
    parts = [sgb_partial(gt, table.slice(0, 3), ks=KS, predicates=LABEL_SET),
             sgb_partial(gt, table.slice(2, 4), ks=KS, predicates=LABEL_SET)]
    with pytest.raises(ValueError, match="more than one row"):
        sgb_stream_results(gt, parts, ks=KS, predicates=LABEL_SET)
