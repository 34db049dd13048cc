"""R@K / mR@K / F1@K / wR@K / buckets on hand-computed cases, both matchers, and the invariants
(hypothesis): image order does not matter, duplicates earn nothing under one-to-one, R@K is
monotone in K."""

from __future__ import annotations

import math

import numpy as np
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from _rows import box as _box, img as _img, rel as _rel, tri as _tri
from relate.metrics import aggregate_per_image, evaluate_recall, load_detections, load_ground_truth, load_predictions
from relate.schema import CORPUS_SCHEMA, IMAGE_SCHEMA, PER_IMAGE_SCHEMA, PREDICTIONS_SCHEMA, SchemaError, to_table


def _gt_hand():
    boxes3 = [_box(0, 0, 10, 10), _box(20, 20, 30, 30), _box(40, 40, 50, 50)]
    return to_table([
        _img("A", boxes3, [_rel(0, 1, "on"), _rel(1, 2, "near"), _rel(0, 2, "on")]),
        _img("B", boxes3[:2], [_rel(0, 1, "holding"), _rel(0, 1, "holding")]),  # duplicate annotation
    ], CORPUS_SCHEMA)


def _pred_hand():
    return to_table([
        {"image_id": "A", "triplets": [_tri(0, 1, "on", .9), _tri(0, 1, "near", .8), _tri(1, 2, "near", .7),
                                       _tri(0, 2, "above", .6), _tri(0, 2, "on", .5)]},
        {"image_id": "B", "triplets": [_tri(1, 0, "holding", .9), _tri(0, 1, "holding", .3)]},
    ], PREDICTIONS_SCHEMA)


def test_hand_computed_graph_constrained():
    gt = load_ground_truth(_gt_hand())
    assert gt.rel_image.size == 4  # the repeated annotation counts once
    r = evaluate_recall(gt, load_predictions(_pred_hand(), gt), ks=(1, 2, 3))
    m = r.metrics
    assert r.mode == "graph_constrained" and r.matcher == "one_to_one" and r.box_source == "gt"
    assert m["R@1"] == pytest.approx(1 / 6)
    assert m["R@2"] == pytest.approx(5 / 6)
    assert m["R@3"] == pytest.approx(5 / 6)  # 'above' took pair (0, 2)'s only slot
    assert m["mR@1"] == pytest.approx((0.5 + 0 + 0) / 3)
    assert m["mR@2"] == pytest.approx((0.5 + 1 + 1) / 3)
    assert m["F1@2"] == pytest.approx(5 / 6)
    # wR: N = 4, n_on = 2, n_near = n_holding = 1 -> weights log2, log4, log4
    assert m["wR@2"] == pytest.approx((math.log(2) * .5 + 2 * math.log(4)) / (math.log(2) + 2 * math.log(4)))
    assert m["rare@2"] == pytest.approx(m["mR@2"]) and math.isnan(m["common@2"])
    assert r.n_cls == {"rare": 3, "common": 0, "frequent": 0}
    assert r.per_predicate[2] == pytest.approx({"on": .5, "near": 1.0, "holding": 1.0})


def test_hand_computed_unconstrained_reads_higher():
    gt = load_ground_truth(_gt_hand())
    r = evaluate_recall(gt, load_predictions(_pred_hand(), gt), ks=(1, 3, 5), graph_constrained=False)
    assert r.mode == "unconstrained"
    assert r.metrics["R@1"] == pytest.approx(1 / 6)
    assert r.metrics["R@3"] == pytest.approx((2 / 3 + 1) / 2)  # B: rank 1 holding(0,1) within 3
    assert r.metrics["R@5"] == pytest.approx(1.0)


def test_buckets_split_by_support():
    imgs = []
    # 600 images of 'on' (frequent), 60 of 'near' (common), 3 of 'under' (rare); all predicted right
    for i, (p, n) in enumerate([("on", 600), ("near", 60), ("under", 3)]):
        imgs += [_img(f"{p}{j}", [_box(0, 0, 5, 5), _box(6, 6, 9, 9)], [_rel(0, 1, p)]) for j in range(n)]
    gt_t = to_table(imgs, CORPUS_SCHEMA)
    guess = lambda r: "under" if r["relations"][0]["predicate"] == "under" else "on"  # noqa: E731
    preds = to_table([{"image_id": r["image_id"], "triplets": [_tri(0, 1, guess(r), 1.0)]} for r in imgs],
                     PREDICTIONS_SCHEMA)
    gt = load_ground_truth(gt_t)
    r = evaluate_recall(gt, load_predictions(preds, gt), ks=(1,))
    assert r.n_cls == {"rare": 1, "common": 1, "frequent": 1}
    assert r.metrics["frequent@1"] == 1.0 and r.metrics["common@1"] == 0.0 and r.metrics["rare@1"] == 1.0
    assert r.support == {"on": 600, "near": 60, "under": 3}


def _detection_case():
    gt = to_table([_img("A", [_box(0, 0, 10, 10, "cup"), _box(20, 20, 30, 30, "table")],
                        [_rel(0, 1, "on"), _rel(0, 1, "near")])], CORPUS_SCHEMA)
    det = to_table([{"image_id": "A", "uri": "x", "width": 100, "height": 100, "source": "det", "split": None,
                     "boxes": [_box(0, 0, 10, 10, "cup"), _box(0, 0, 10, 10.5, "cup"), _box(20, 20, 30, 30, "table")]}],
                   IMAGE_SCHEMA)
    preds = to_table([{"image_id": "A", "triplets": [_tri(0, 2, "on", .9), _tri(1, 2, "near", .8)]}], PREDICTIONS_SCHEMA)
    return gt, det, preds


def test_detection_mode_legacy_gives_duplicate_credit():
    gt_t, det_t, pred_t = _detection_case()
    gt = load_ground_truth(gt_t)
    det = load_detections(det_t, gt)
    preds = load_predictions(pred_t, gt, n_boxes={"A": 3})
    legacy = evaluate_recall(gt, preds, ks=(2,), detections=det, matcher="legacy")
    strict = evaluate_recall(gt, preds, ks=(2,), detections=det, matcher="one_to_one")
    assert legacy.box_source == "detector" and legacy.matcher == "legacy"
    assert legacy.metrics["R@2"] == 1.0   # the duplicate box d1 recovers 'near' a second time
    assert strict.metrics["R@2"] == 0.5   # g0 belongs to d0 (IoU 1.0 > 0.95); d1 earns nothing
    cat = evaluate_recall(gt, preds, ks=(2,), detections=det, matcher="legacy", require_category=True)
    assert cat.metrics["R@2"] == 1.0


def test_bad_prediction_files_name_file_and_row(tmp_path):
    gt = load_ground_truth(_gt_hand())
    good = _pred_hand()
    p = tmp_path / "sys.parquet"
    pq.write_table(good.drop(["triplets"]), p)
    with pytest.raises(SchemaError, match=r"sys\.parquet.*missing column.*triplets"):
        load_predictions(p, gt)
    rows = good.to_pylist()
    rows[1]["triplets"][0]["object"] = 7
    pq.write_table(to_table(rows, PREDICTIONS_SCHEMA), p)
    with pytest.raises(SchemaError, match=r"sys\.parquet row 1 \(image_id='B'\).*object.*out of range"):
        load_predictions(p, gt)
    rows = good.to_pylist()
    rows[0]["triplets"][2]["score"] = float("nan")
    pq.write_table(to_table(rows, PREDICTIONS_SCHEMA), p)
    with pytest.raises(SchemaError, match=r"sys\.parquet row 0 \(image_id='A'\).*score\[2\].*NaN"):
        load_predictions(p, gt)
    with pytest.raises(SchemaError, match="cannot read"):
        load_predictions(tmp_path / "missing.parquet", gt)


# ---------------------------------------------------------------- properties (hypothesis)

@st.composite
def _world(draw):
    n_img = draw(st.integers(1, 6))
    vocab = ["on", "near", "has", "under"]
    imgs, preds = [], []
    for i in range(n_img):
        nb = draw(st.integers(2, 5))
        boxes = [_box(j * 10, j * 10, j * 10 + 8, j * 10 + 8) for j in range(nb)]
        pairs = [(a, b) for a in range(nb) for b in range(nb) if a != b]
        g = draw(st.lists(st.tuples(st.sampled_from(pairs), st.sampled_from(vocab)), max_size=6))
        t = draw(st.lists(st.tuples(st.sampled_from(pairs), st.sampled_from(vocab),
                                    st.floats(0, 1, allow_nan=False)), max_size=12))
        imgs.append(_img(f"i{i}", boxes, [_rel(a, b, p) for (a, b), p in g]))
        preds.append({"image_id": f"i{i}", "triplets": [_tri(a, b, p, s) for (a, b), p, s in t]})
    return imgs, preds


def _run(imgs, preds, **kw):
    gt = load_ground_truth(to_table(imgs, CORPUS_SCHEMA))
    return evaluate_recall(gt, load_predictions(to_table(preds, PREDICTIONS_SCHEMA), gt), **kw).metrics


_SET = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _same(a, b):
    for k in a:
        assert (math.isnan(a[k]) and math.isnan(b[k])) or a[k] == pytest.approx(b[k]), k


@_SET
@given(_world(), st.randoms(use_true_random=False), st.booleans())
def test_permuting_images_changes_nothing(world, rnd, gc):
    imgs, preds = world
    base = _run(imgs, preds, ks=(1, 3, 10), graph_constrained=gc)
    order = list(range(len(imgs)))
    rnd.shuffle(order)
    porder = list(range(len(preds)))
    rnd.shuffle(porder)
    _same(base, _run([imgs[i] for i in order], [preds[i] for i in porder], ks=(1, 3, 10), graph_constrained=gc))


@_SET
@given(_world(), st.booleans())
def test_duplicated_predictions_earn_nothing_under_one_to_one(world, gc):
    imgs, preds = world
    base = _run(imgs, preds, ks=(1, 3, 10), graph_constrained=gc)
    dup = [{"image_id": p["image_id"], "triplets": p["triplets"] + p["triplets"]} for p in preds]
    got = _run(imgs, dup, ks=(1, 3, 10), graph_constrained=gc)
    for k in base:
        if k.startswith(("R@", "mR@", "F1@", "wR@", "rare@")) and not math.isnan(base[k]):
            assert got[k] <= base[k] + 1e-12, k


@_SET
@given(_world(), st.booleans(), st.sampled_from(["one_to_one", "legacy"]))
def test_recall_monotone_in_k(world, gc, matcher):
    imgs, preds = world
    m = _run(imgs, preds, ks=(1, 2, 5, 50), graph_constrained=gc, matcher=matcher)
    for name in ("R", "mR", "wR"):
        vals = [m[f"{name}@{k}"] for k in (1, 2, 5, 50)]
        if not any(math.isnan(v) for v in vals):
            assert all(a <= b + 1e-12 for a, b in zip(vals, vals[1:])), (name, vals)


def test_duplicate_detections_earn_nothing_under_one_to_one():
    rng = np.random.default_rng(0)
    for _ in range(20):
        nb = 4
        xy = rng.uniform(0, 60, (nb, 2))
        boxes = [_box(float(x), float(y), float(x) + 20, float(y) + 20) for x, y in xy]
        pairs = [(a, b) for a in range(nb) for b in range(nb) if a != b]
        vocab = ["on", "near", "has"]
        rels = [_rel(a, b, vocab[rng.integers(3)]) for a, b in pairs if rng.random() < .5]
        gt = load_ground_truth(to_table([_img("A", boxes, rels)], CORPUS_SCHEMA))
        tri = [_tri(a, b, vocab[rng.integers(3)], float(rng.random())) for a, b in pairs]
        # the detector returns every GT box plus a near-copy of each; predictions on the copies
        # use other predicates, which only duplicate credit could reward
        det_boxes = boxes + [_box(b["x1"], b["y1"], b["x2"], b["y2"] + 0.5) for b in boxes]
        det = load_detections(to_table([{"image_id": "A", "uri": "x", "width": 100, "height": 100, "source": "d",
                                         "split": None, "boxes": det_boxes}], IMAGE_SCHEMA), gt)
        tri_dup = tri + [_tri(t["subject"] + nb, t["object"] + nb, vocab[rng.integers(3)], t["score"] * 0.99) for t in tri]
        one = {}
        for name, t in (("base", tri), ("dup", tri_dup)):
            p = load_predictions(to_table([{"image_id": "A", "triplets": t}], PREDICTIONS_SCHEMA), gt, n_boxes={"A": 2 * nb})
            one[name] = {m: evaluate_recall(gt, p, ks=(50,), detections=det, matcher=m).metrics["R@50"]
                         for m in ("one_to_one", "legacy")}
        if rels:
            assert one["dup"]["one_to_one"] == pytest.approx(one["base"]["one_to_one"])
            assert one["dup"]["legacy"] >= one["base"]["legacy"]


def test_vectorised_greedy_assignment_equals_sequential_greedy():
    from relate.metrics._boxmatch import greedy_one_to_one

    rng = np.random.default_rng(3)
    for _ in range(200):
        n = int(rng.integers(1, 40))
        a, b = rng.integers(0, 6, n), rng.integers(0, 6, n)
        key = np.unique(np.stack([a, b], 1), axis=0)
        a, b = key[:, 0], key[:, 1]
        v = rng.integers(0, 5, a.size).astype(float)  # many ties on purpose
        got = greedy_one_to_one(a, b, v)
        # sequential greedy: highest value first; ties by smaller b, then smaller a
        used_a, used_b, want = set(), set(), np.zeros(a.size, bool)
        for i in sorted(range(a.size), key=lambda i: (-v[i], b[i], a[i])):
            if a[i] not in used_a and b[i] not in used_b:
                used_a.add(a[i]), used_b.add(b[i])
                want[i] = True
        np.testing.assert_array_equal(got, want)
        assert len(set(a[got])) == got.sum() and len(set(b[got])) == got.sum()


def test_vectorised_evaluator_equals_the_per_image_loop():
    from benchmarks._loop_baseline import loop_recall
    from benchmarks.evaluator import KS, make_data, vectorised

    corpus, preds = make_data(300, seed=5)
    vec = vectorised(corpus, preds)
    loop = loop_recall(corpus.select(["image_id", "relations"]).to_pylist(),
                       {r["image_id"]: r["triplets"] for r in preds.to_pylist()}, KS)
    assert set(loop) <= set(vec)
    for k, v in loop.items():
        assert (math.isnan(v) and math.isnan(vec[k])) or vec[k] == pytest.approx(v, abs=1e-12), k
    assert vec["R@20"] <= vec["R@50"] <= vec["R@100"]


@_SET
@given(_world(), st.booleans(), st.sampled_from([None, 1, 3]))
def test_row_wise_ranking_equals_global_ranking(world, gc, k):
    from dataclasses import replace

    from relate.metrics import rank_predictions

    imgs, preds = world
    gt = load_ground_truth(to_table(imgs, CORPUS_SCHEMA))
    p = load_predictions(to_table(preds, PREDICTIONS_SCHEMA), gt)
    a_idx, a_rank = rank_predictions(p, graph_constrained=gc, max_k=k)
    b_idx, b_rank = rank_predictions(replace(p, offsets=None), graph_constrained=gc, max_k=k)
    assert sorted(zip(a_idx.tolist(), a_rank.tolist())) == sorted(zip(b_idx.tolist(), b_rank.tolist()))


# ---------------------------------------------------------------- per-image rows (issue 15)

def _terms(row):
    return {t["predicate"]: (t["hits"], t["n_gt"]) for t in row["predicates"]}


def test_per_image_rows_hand_computed():
    gt = load_ground_truth(_gt_hand())
    r = evaluate_recall(gt, load_predictions(_pred_hand(), gt), ks=(1, 2), per_image=True)
    rows = {(x["image_id"], x["k"]): x for x in r.per_image}
    assert set(rows) == {("A", 1), ("A", 2), ("B", 1), ("B", 2)}
    # A: GC ranks on(0,1)=0, near(1,2)=1, above(0,2)=2; B: holding(1,0)=0, holding(0,1)=1
    assert (rows["A", 1]["n_gt"], rows["A", 1]["hits"]) == (3, 1) and rows["A", 1]["recall"] == pytest.approx(1 / 3)
    assert (rows["A", 2]["hits"], rows["B", 1]["hits"], rows["B", 2]["hits"]) == (2, 0, 1)
    assert _terms(rows["A", 1]) == {"on": (1, 2), "near": (0, 1)}
    assert _terms(rows["A", 2]) == {"on": (1, 2), "near": (1, 1)}
    assert _terms(rows["B", 2]) == {"holding": (1, 1)}  # the duplicate annotation counts once
    assert {x["protocol"] for x in r.per_image} == {"paper"} and rows["A", 1]["mode"] == "graph_constrained"
    for k in (1, 2):
        agg = aggregate_per_image(r.per_image, k)
        assert agg[f"R@{k}"] == pytest.approx(r.metrics[f"R@{k}"])
        assert agg[f"mR@{k}"] == pytest.approx(r.metrics[f"mR@{k}"])
    table = to_table([{"system": "s", "benchmark": "b", "axis": "A1", **x} for x in r.per_image], PER_IMAGE_SCHEMA)
    assert table.num_rows == 4 and "per_image" not in r.to_dict()


def test_per_image_rows_detector_boxes_add_up():
    gt_t, det_t, pred_t = _detection_case()
    gt = load_ground_truth(gt_t)
    det = load_detections(det_t, gt)
    preds = load_predictions(pred_t, gt, n_boxes={"A": 3})
    for matcher in ("legacy", "one_to_one"):
        r = evaluate_recall(gt, preds, ks=(2,), detections=det, matcher=matcher, per_image=True)
        assert r.per_image[0]["box_source"] == "detector" and r.per_image[0]["matcher"] == matcher
        assert aggregate_per_image(r.per_image, 2)["R@2"] == pytest.approx(r.metrics["R@2"])


def test_per_image_rows_refused_for_sgb():
    gt = load_ground_truth(_gt_hand())
    with pytest.raises(ValueError, match="paper"):
        evaluate_recall(gt, load_predictions(_pred_hand(), gt), protocol="sgb", per_image=True)


@_SET
@given(_world(), st.booleans(), st.sampled_from(["one_to_one", "legacy"]))
def test_per_image_rows_aggregate_to_the_report(world, gc, matcher):
    imgs, preds = world
    gt = load_ground_truth(to_table(imgs, CORPUS_SCHEMA))
    r = evaluate_recall(gt, load_predictions(to_table(preds, PREDICTIONS_SCHEMA), gt), ks=(1, 3, 10),
                        graph_constrained=gc, matcher=matcher, per_image=True)
    assert len(r.per_image) == 3 * int((np.bincount(gt.rel_image, minlength=gt.n_images) > 0).sum())
    for k in (1, 3, 10):
        _same(aggregate_per_image(r.per_image, k), {f"R@{k}": r.metrics[f"R@{k}"], f"mR@{k}": r.metrics[f"mR@{k}"]})
