"""Predictions that carry objects (SCENE_GRAPHS_SCHEMA): validation errors, and sgcls / sgdet
scored straight from the file, on cases worked by hand (numbers in the comments); the dense path is
also checked against the sparse ``sgb`` path (itself checked against a loop reference)."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

from _rows import box as _box, img as _img, rel as _rel, tri as _tri
from relate.metrics import evaluate_recall, evaluate_scene_graphs, load_ground_truth, load_scene_graphs
from relate.metrics.scene_graphs import dense_to_predictions
from relate.schema import (CORPUS_SCHEMA, SchemaError, scene_graph_predicates, scene_graphs_schema, to_table,
                           validate_scene_graphs)


def _obj(x1, y1, x2, y2, label, score=1.0):
    return {"x1": x1, "y1": y1, "x2": x2, "y2": y2, "label": label, "score": score}


def _row(iid, objects, pairs=(), scores=(), triplets=()):
    return {"image_id": iid, "objects": objects, "pairs": [{"subject": s, "object": o} for s, o in pairs],
            "pair_scores": [list(map(float, x)) for x in scores], "triplets": list(triplets)}


def _table(rows, predicates=("on", "near")):
    return to_table(rows, scene_graphs_schema(predicates), table="sg")


MAN, HORSE, HAT = (0, 0, 9, 9), (20, 20, 29, 29), (40, 40, 49, 49)
GT_BOXES = [_box(*MAN, "man"), _box(*HORSE, "horse"), _box(*HAT, "hat")]


def _gt(images):
    return load_ground_truth(to_table(images, CORPUS_SCHEMA))


def _score(gt, rows, columns=("on", "near"), **kw):
    """Metrics of ``rows`` whose pair_scores columns are ``columns`` (also the label set unless given)."""
    kw.setdefault("ks", (1, 2))
    kw.setdefault("protocol", "sgb")
    kw.setdefault("predicates", list(columns))
    return evaluate_scene_graphs(gt, load_scene_graphs(_table(rows, columns), gt), **kw).metrics


# ------------------------------------------------------------------ validation

def _valid():
    return [_row("A", [_obj(*MAN, "man"), _obj(*HORSE, "horse")], [(0, 1), (1, 0)], [[.9, .1], [.2, .3]])]


def test_valid_table_round_trips_with_its_predicate_list(tmp_path):
    t = _table(_valid(), ("on", "near"))
    assert list(validate_scene_graphs(t)) == [2]
    pq.write_table(t, tmp_path / "sg.parquet")
    back = pq.read_table(tmp_path / "sg.parquet")
    assert scene_graph_predicates(back.schema) == ["on", "near"]
    assert list(validate_scene_graphs(back)) == [2]


@pytest.mark.parametrize("edit, match", [
    (lambda r: r["pairs"].__setitem__(1, {"subject": 1, "object": 2}),
     r"sg row 0 \(image_id='A'\): pairs.object\[1\] = 2: index out of range"),
    (lambda r: r["pairs"].__setitem__(1, {"subject": 0, "object": 1}),
     r"row 0 \(image_id='A'\): pairs\[1\]: the same \(subject, object\) pair is listed twice"),
    (lambda r: r["pairs"].__setitem__(1, {"subject": 1, "object": 1}), r"pairs\[1\] = 1: self-loop"),
    (lambda r: r["pair_scores"].__setitem__(1, [.2]), r"pair_scores\[1\] = 1: must hold one score per predicate \(2\)"),
    (lambda r: r["pair_scores"].pop(), r"pair_scores = 1: has a different length from pairs"),
    (lambda r: r["pair_scores"][1].__setitem__(1, float("nan")),
     r"row 0 \(image_id='A'\): pair_scores\[1\]\[1\] = nan: is null, NaN or infinite"),
    (lambda r: r["objects"][1].update(x2=10.0), r"objects.x2\[1\] = 10.0: is smaller than x1"),
    (lambda r: r["objects"][0].update(score=float("inf")), r"objects.score\[0\] = inf"),
    (lambda r: r["objects"][0].update(label=" "), r"objects.label\[0\]: is an empty string"),
    (lambda r: r["triplets"].append(_tri(0, 5, "on", .5)), r"triplets.object\[0\] = 5: index out of range"),
])
def test_validation_names_row_image_field_and_position(edit, match):
    rows = _valid()
    edit(rows[0])
    with pytest.raises(SchemaError, match=match):
        validate_scene_graphs(_table(rows), name="sg")


@pytest.mark.parametrize("scores, bad", [
    ([[.9, float("inf")], [.2, .3]], r"pair_scores\[0\]\[1\] = inf"),
    ([[.9, float("-inf")], [.2, .3]], r"pair_scores\[0\]\[1\] = -inf"),
    ([[float("inf"), .1], [.2, float("-inf")]], r"pair_scores\[0\]\[0\] = inf.*2 bad value"),  # their sum is NaN
    ([[3e38, 3e38], [3e38, .3]], None),  # finite, though the sum overflows: not refused
])
def test_scores_are_checked_finite_in_one_pass_and_located_when_not(scores, bad):
    rows = _valid()
    rows[0]["pair_scores"] = scores
    if bad is None:
        assert list(validate_scene_graphs(_table(rows), name="sg")) == [2]
    else:
        with pytest.raises(SchemaError, match=r"sg row 0 \(image_id='A'\): " + bad):
            validate_scene_graphs(_table(rows), name="sg")


@pytest.mark.parametrize("n_objects", [3, 5000])  # keys counted (dense) or sorted (sparse): both find the repeat
def test_a_repeated_pair_is_found_in_dense_and_sparse_tables(n_objects):
    objs = [_obj(i, i, i + 5, i + 5, "man") for i in range(n_objects)]
    rows = [_row("A", objs, [(0, 1), (n_objects - 1, 0), (1, 2)], [[.1, .2]] * 3),
            _row("B", objs[:3], [(0, 1), (2, 1), (0, 1)], [[.1, .2]] * 3)]
    with pytest.raises(SchemaError, match=r"row 1 \(image_id='B'\): pairs\[2\]: the same \(subject, object\) pair"):
        validate_scene_graphs(_table(rows), name="sg")
    rows[1]["pairs"][2] = {"subject": 2, "object": 0}
    rows[1]["pair_scores"] = [[.1, .2]] * 3
    assert list(validate_scene_graphs(_table(rows), name="sg")) == [n_objects, 3]


def test_pairs_need_the_predicate_list_and_rows_are_unique():
    t = _table(_valid()).replace_schema_metadata(None)
    with pytest.raises(SchemaError, match="names no predicate list"):
        validate_scene_graphs(t, name="sg")
    with pytest.raises(SchemaError, match=r"image_id\(s\) in more than one row: \['A'\]"):
        validate_scene_graphs(_table(_valid() + _valid()), name="sg")
    with pytest.raises(SchemaError, match="repeated"):
        scene_graphs_schema(["on", "on"])


def test_loading_casts_to_the_project_types():
    # float64 scores and int64 indices written by another tool load as float32 / int64 arrays; a
    # string where a score belongs is a SchemaError naming the table
    import pyarrow as pa

    gt = _gt([_img("A", GT_BOXES, [_rel(0, 1, "on")])])
    t = _table(_valid())
    wide = t.cast(pa.schema([f if f.name != "pair_scores" else pa.field("pair_scores", pa.list_(pa.list_(pa.float64())))
                             for f in t.schema], metadata=t.schema.metadata))
    sg = load_scene_graphs(wide, gt)
    assert sg.scores.dtype == np.float32 and sg.scores.shape == (2, 2)
    bad = t.set_column(1, "objects", pa.array([[{"x1": "a"}]]))
    with pytest.raises(SchemaError, match="scene_graphs: cannot cast"):
        load_scene_graphs(bad, gt)


def test_unknown_image_is_named():
    gt = _gt([_img("B", GT_BOXES, [_rel(0, 1, "on")])])
    with pytest.raises(SchemaError, match=r"not in the ground truth: \['A'\]"):
        load_scene_graphs(_table(_valid()), gt)


# ------------------------------------------------------------------ sgb scoring, dense

def _sgcls_rows(horse_label="horse"):
    # sgcls: the GT boxes with predicted labels and label scores man .5, horse .5, hat 1.
    objs = [_obj(*MAN, "man", .5), _obj(*HORSE, horse_label, .5), _obj(*HAT, "hat", 1.0)]
    return [_row("A", objs, [(0, 1), (2, 0)], [[.9, .1], [.6, .3]])]


def test_sgcls_ranks_pairs_by_predicate_times_object_scores():
    # GT: man on horse, man near horse. Pair (0,1) best "on" .9 x .5 x .5 = .225; pair (2,0) best
    # "on" .6 x 1 x .5 = .3 ranks first. Graph-constrained: R@1 = 0, R@2 = 1/2 (the pair's slot
    # holds "on" only). Ranked by the predicate score alone, (0,1) would come first: R@1 = 1/2.
    gt = _gt([_img("A", GT_BOXES, [_rel(0, 1, "on"), _rel(0, 1, "near")])])
    m = _score(gt, _sgcls_rows())
    assert (m["R@1"], m["R@2"]) == (0.0, 0.5)
    # unconstrained entries: (2,0,on) .3, (0,1,on) .225, (2,0,near) .15, (0,1,near) .1 x .25 = .025
    m = _score(gt, _sgcls_rows(), ks=(2, 3, 4), graph_constrained=False)
    assert (m["R@2"], m["R@3"], m["R@4"]) == (0.5, 0.5, 1.0)
    # the horse predicted as a cow links to no GT box: nothing is found
    assert _score(gt, _sgcls_rows("cow"), ks=(4,), graph_constrained=False)["R@4"] == 0.0


def _sgdet_rows(y2):
    # sgdet: the detected man keeps x and the top edge and ends at y2; the horse is exact.
    return [_row("A", [_obj(0, 0, 9, y2, "man"), _obj(*HORSE, "horse")], [(0, 1)], [[.9, .1]])]


def test_sgdet_links_by_plus_one_iou():
    # +1 pixels: GT man 10 x 10 = 100 px, detection (0,0)-(9,4) 10 x 5 = 50 px inside it: IoU = 0.5
    # exactly, which links (R@1 = 1); ending at 3.9: 49 / 100 < 0.5, no link (R@1 = 0).
    gt = _gt([_img("A", GT_BOXES, [_rel(0, 1, "on")])])
    assert _score(gt, _sgdet_rows(4.0))["R@1"] == 1.0
    assert _score(gt, _sgdet_rows(3.9))["R@1"] == 0.0


def test_argmax_ties_follow_the_label_set_not_the_file_columns():
    # the file names its columns (near, on) and scores both .6; GT "on". SGB's argmax takes the
    # lowest label index: label set (on, near) -> "on" holds the slot, R@1 = 1; (near, on) -> 0.
    gt = _gt([_img("A", GT_BOXES, [_rel(0, 1, "on")])])
    rows = [_row("A", [_obj(*MAN, "man"), _obj(*HORSE, "horse")], [(0, 1)], [[.6, .6]])]
    assert _score(gt, rows, ("near", "on"), predicates=["on", "near"])["R@1"] == 1.0
    assert _score(gt, rows, ("near", "on"), predicates=["near", "on"])["R@1"] == 0.0


def test_columns_outside_the_label_set_are_not_scored_and_counted():
    # columns (on, touching); label set (on, near): "touching" .9 is dropped, so the pair's slot
    # holds "on" .2 and finds the GT (R@1 = 1); 1 pair x 1 dropped column = 1 unscored entry.
    gt = _gt([_img("A", GT_BOXES, [_rel(0, 1, "on")])])
    rows = [_row("A", [_obj(*MAN, "man"), _obj(*HORSE, "horse")], [(0, 1)], [[.2, .9]])]
    m = _score(gt, rows, ("on", "touching"), predicates=["on", "near"])
    assert m["R@1"] == 1.0 and m["n_unscored_triplets"] == 1.0


def test_unconstrained_dense_keeps_only_the_top_100():
    # one pair, 150 predicates p0..p149 scored 1 - i/1000; GT p120 is the 121st entry: SGB cuts the
    # unconstrained list at 100 before K, so R@200 = 0 (uncut it would be 1); R@200 GC = 0 too
    # (the slot holds p0), and with GT p99 (the 100th entry) unconstrained R@200 = 1.
    names = [f"p{i}" for i in range(150)]
    rows = [_row("A", [_obj(*MAN, "man"), _obj(*HORSE, "horse")], [(0, 1)], [[1 - i / 1000 for i in range(150)]])]
    for gt_pred, want in (("p120", 0.0), ("p99", 1.0)):
        gt = _gt([_img("A", GT_BOXES, [_rel(0, 1, gt_pred)])])
        assert _score(gt, rows, names, ks=(100, 200), graph_constrained=False)["R@200"] == want


def test_images_without_pairs_are_skipped():
    # A found; B has objects but no scored pair -> skipped by SGB: R@1 = 1 over 1 image
    # (counting B as a miss: 1 / 2).
    gt = _gt([_img("A", GT_BOXES, [_rel(0, 1, "on")]), _img("B", GT_BOXES, [_rel(0, 1, "on")])])
    rows = _sgdet_rows(9.0) + [_row("B", [_obj(*MAN, "man")])]
    m = _score(gt, rows)
    assert m["R@1"] == 1.0 and m["n_images_scored"] == 1.0


def test_sgb_refuses_unlabelled_objects_and_mixed_files():
    gt = _gt([_img("A", GT_BOXES, [_rel(0, 1, "on")])])
    rows = [_row("A", [_obj(*MAN, None), _obj(*HORSE, "horse")], [(0, 1)], [[.9, .1]])]
    with pytest.raises(ValueError, match="null label"):
        _score(gt, rows)
    rows = [_row("A", [_obj(*MAN, "man"), _obj(*HORSE, "horse")], [(0, 1)], [[.9, .1]], [_tri(0, 1, "on", .5)])]
    with pytest.raises(ValueError, match="both dense pair_scores"):
        _score(gt, rows)


def test_sparse_triplets_over_objects_score_like_a_detector_table():
    # a ranked submission: triplets only; (1,0) near .9 ranks above (0,1) on .5 -> R@1 = 0, R@2 = 1
    gt = _gt([_img("A", GT_BOXES, [_rel(0, 1, "on")])])
    rows = [_row("A", [_obj(*MAN, "man"), _obj(*HORSE, "horse")], triplets=[_tri(0, 1, "on", .5),
                                                                             _tri(1, 0, "near", .9)])]
    m = _score(gt, rows)
    assert (m["R@1"], m["R@2"]) == (0.0, 1.0)


@pytest.mark.parametrize("gc", [True, False])
def test_dense_equals_the_sparse_sgb_path_on_random_sgdet(gc):
    rng = np.random.default_rng(3)
    labels, cats = ["on", "near", "has", "under", "behind"], ["a", "b", "c"]
    images, rows, tri_rows = [], [], []
    for i in range(40):
        ng = int(rng.integers(2, 6))
        gb = np.round(rng.uniform(0, 40, (ng, 2)), 1)
        gboxes = np.concatenate([gb, gb + rng.integers(5, 30, (ng, 2))], 1)
        gcat = list(rng.choice(cats, ng))
        rels = [(int(a), int(b), str(rng.choice(labels))) for a, b in rng.integers(0, ng, (4, 2)) if a != b]
        images.append(_img(f"i{i}", [_box(*map(float, b), c) for b, c in zip(gboxes, gcat)], [_rel(*r) for r in rels]))
        src = np.concatenate([np.arange(ng), rng.integers(0, ng, int(rng.integers(0, 3)))])
        db = gboxes[src] + rng.normal(0, 1.5, (src.size, 4))
        db[:, 2:] = np.maximum(db[:, 2:], db[:, :2])
        objs = [_obj(*map(float, b), gcat[j] if rng.uniform() < .85 else "a", float(np.round(rng.uniform(.2, 1), 2)))
                for b, j in zip(db, src)]
        pairs = [(a, b) for a in range(src.size) for b in range(src.size) if a != b]
        pairs = [pairs[k] for k in rng.permutation(len(pairs))[:int(rng.integers(0, len(pairs) + 1))]]
        sc = np.round(rng.uniform(0, 1, (len(pairs), len(labels))), 2)  # rounding makes ties
        for k, (a, b) in enumerate(pairs):  # a system that often knows the GT predicate
            for gs, go, p in rels:
                if (src[a], src[b]) == (gs, go) and rng.uniform() < .7:
                    sc[k, labels.index(p)] = .95
        rows.append(_row(f"i{i}", objs, pairs, sc))
        tri_rows.append(_row(f"i{i}", objs, triplets=[_tri(a, b, p, float(sc[k, c])) for k, (a, b) in enumerate(pairs)
                                                       for c, p in enumerate(labels)]))
    gt = _gt(images)
    ks = (5, 20, 50)
    dense = evaluate_scene_graphs(gt, load_scene_graphs(_table(rows, labels), gt), ks=ks, graph_constrained=gc,
                                  protocol="sgb", predicates=labels).metrics
    sparse = evaluate_scene_graphs(gt, load_scene_graphs(_table(tri_rows, labels), gt), ks=ks, graph_constrained=gc,
                                   protocol="sgb", predicates=labels).metrics
    assert dense["R@50"] > 0.3
    # ranked and credited a few images at a time (blocks of 3 pairs), nothing changes
    from relate.metrics.scene_graphs import sgb_dense_hits, sgb_dense_result

    hit, pair_img, unscored = sgb_dense_hits(gt, load_scene_graphs(_table(rows, labels), gt), ks, gc, labels, .5,
                                             block_pairs=3)
    blocks = sgb_dense_result(gt, hit, pair_img, unscored, ks, gc, labels, per_image=False).metrics
    assert {k: blocks[k] for k in dense if "@" in k} == pytest.approx({k: dense[k] for k in dense if "@" in k}, nan_ok=True)
    for k in ks:
        assert dense[f"R@{k}"] == pytest.approx(sparse[f"R@{k}"]) and dense[f"mR@{k}"] == pytest.approx(sparse[f"mR@{k}"])
    # the paper protocol on the same dense file equals it on the expanded triplets (the objects carry
    # labels, so the file is scored with them, as the detector table is asked to be)
    pd = evaluate_scene_graphs(gt, load_scene_graphs(_table(rows, labels), gt), ks=ks, graph_constrained=gc).metrics
    sg_tri = load_scene_graphs(_table(tri_rows, labels), gt)
    ps = evaluate_recall(gt, _times_object_scores(sg_tri), ks=ks, graph_constrained=gc, detections=sg_tri.objects,
                         require_category=True).metrics
    assert [pd[f"R@{k}"] for k in ks] == pytest.approx([ps[f"R@{k}"] for k in ks])


def _times_object_scores(sg):
    import dataclasses

    t = sg.triplets
    s = sg.object_scores[sg.objects.box_offsets[t.image] + t.subject]
    o = sg.object_scores[sg.objects.box_offsets[t.image] + t.object]
    return dataclasses.replace(t, score=((t.score.astype(np.float32) * s) * o).astype(np.float64))


def test_paper_protocol_keeps_each_pairs_best_predicate():
    # paper, graph-constrained: pair (0,1) offers only its argmax "on"; GT "near" is never found
    gt = _gt([_img("A", GT_BOXES, [_rel(0, 1, "near")])])
    sg = load_scene_graphs(_table(_sgdet_rows(9.0)), gt)
    p = dense_to_predictions(sg, gt, graph_constrained=True, max_k=10)
    assert p.n == 1 and p.vocab[p.predicate[0]] == "on"
    r = evaluate_scene_graphs(gt, sg, ks=(2,))
    assert r.metrics["R@2"] == 0.0 and r.box_source == "objects" and r.protocol == "paper"
    assert evaluate_scene_graphs(gt, sg, ks=(2,), graph_constrained=False).metrics["R@2"] == 1.0


def test_graph_constrained_ties_keep_file_order():
    # pairs (2,0) then (0,1), both "on" .5 with label scores 1: equal triple scores keep the file's
    # order, so (2,0) takes rank 0 and GT man-on-horse waits: R@1 = 0, R@2 = 1 (reversed: R@1 = 1).
    gt = _gt([_img("A", GT_BOXES, [_rel(0, 1, "on")])])
    objs = [_obj(*MAN, "man"), _obj(*HORSE, "horse"), _obj(*HAT, "hat")]
    m = _score(gt, [_row("A", objs, [(2, 0), (0, 1)], [[.5, 0], [.5, 0]])])
    assert (m["R@1"], m["R@2"]) == (0.0, 1.0)


def test_ovsgg_scores_a_scene_graphs_file_without_a_detector_table(tmp_path):
    from eval_jobs.ovsgg import BenchmarkSpec, OVSGGConfig
    from eval_jobs.ovsgg_cells import load_benchmark, score_cell

    # GT A: man on horse, man near horse; B: man on horse, no scored pair (skipped by sgb).
    # The file's sgcls output for A: (2,0) ranks above (0,1) (see the sgcls test); K = 1 and 2.
    images = [_img("A", GT_BOXES, [_rel(0, 1, "on"), _rel(0, 1, "near")]), _img("B", GT_BOXES, [_rel(0, 1, "on")])]
    pq.write_table(to_table(images, CORPUS_SCHEMA), tmp_path / "c.parquet")
    pq.write_table(_table(_sgcls_rows() + [_row("B", [_obj(*MAN, "man")])]), tmp_path / "sg.parquet")
    spec = BenchmarkSpec(name="b", axis="A1", reader="parquet", path=str(tmp_path / "c.parquet"))
    bench = load_benchmark(spec)
    cfg = OVSGGConfig(benchmarks=[spec], protocol="sgb", ks=[1, 2], headline_k=2)
    rec = score_cell(spec, bench, str(tmp_path / "sg.parquet"), cfg)["recall"]
    # sgb: A only, R@1 = 0, R@2 = 1/2; mR@2 over (near, on): near 0, on 1 -> 1/2
    assert rec["protocol"] == "sgb" and rec["box_source"] == "objects"
    assert (rec["metrics"]["R@1"], rec["metrics"]["R@2"], rec["metrics"]["mR@2"]) == (0.0, 0.5, 0.5)
    # paper: both images count (B scores 0): R@2 = (1/2 + 0) / 2; per-image rows ride along
    cell = score_cell(spec, bench, str(tmp_path / "sg.parquet"), OVSGGConfig(benchmarks=[spec], ks=[2], headline_k=2))
    assert cell["recall"]["metrics"]["R@2"] == pytest.approx(0.25) and len(cell["_per_image"]) == 2


def test_integer_sort_key_orders_like_a_float_lexsort():
    # group ascending, score descending, ties (also -0 against +0) in input order
    from relate.metrics.sgb import _desc_key

    rng = np.random.default_rng(0)
    x = rng.choice(np.array([-2.5, -1e-30, -0.0, 0.0, 1e-30, .25, .5, 3e9], np.float32), 400)
    g = rng.integers(0, 5, 400)
    want = np.lexsort((np.arange(400), -x.astype(np.float64), g))
    assert np.array_equal(np.argsort(_desc_key(g, x), kind="stable"), want)


def test_box_links_are_the_same_in_blocks_of_images():
    # A and C: the two objects are the GT boxes (2 links each); B has no GT box (no link). Blocks of
    # one box pair at a time must find the same 4 links as one block.
    from relate.metrics.sgb import _links

    gt = _gt([_img("A", GT_BOXES[:2], [_rel(0, 1, "on")]), _img("B", []), _img("C", GT_BOXES[:2], [_rel(1, 0, "on")])])
    objs = [_obj(*MAN, "man"), _obj(*HORSE, "horse")]
    sg = load_scene_graphs(_table([_row("A", objs), _row("B", objs[:1]), _row("C", objs)]), gt)
    args = (gt, sg.objects.box_offsets, sg.objects.boxes, sg.objects.categories, .5)
    whole, blocks = _links(*args), _links(*args, chunk=1)
    assert [x.tolist() for x in whole] == [[0, 0, 2, 2], [0, 1, 0, 1], [0, 1, 0, 1]]
    assert all(np.array_equal(a, b) for a, b in zip(whole, blocks))
