"""The ``sgb`` protocol, one rule per test, on cases worked by hand (numbers in the comments).

Every rule is read from Scene-Graph-Benchmark.pytorch (SGB); each test is built so that the rule
implemented the other way (no +1, float64, deduplicated GT, zero for skipped images, mean over
present predicates, one-to-one, ranking by the predicate score alone, another tie order, no
100-entry cap) gives a different number. A loop-per-image reference checks the vectorised code
on random graphs.
"""

from __future__ import annotations

import numpy as np
import pytest

from _rows import box as _box, img as _img, rel as _rel, tri as _tri
from relate.metrics import Detections, evaluate_recall, load_detections, load_ground_truth, load_predictions, sgb_iou
from relate.schema import CORPUS_SCHEMA, IMAGE_SCHEMA, PREDICTIONS_SCHEMA, to_table


def _gt(images):
    return load_ground_truth(to_table(images, CORPUS_SCHEMA))


def _preds(gt, rows, n_boxes=None):
    table = to_table([{"image_id": i, "triplets": t} for i, t in rows], PREDICTIONS_SCHEMA)
    return load_predictions(table, gt, n_boxes=n_boxes)


def _sgdet(gt, det_boxes):
    """Detections per image id, and predictions indexing them."""
    det = load_detections(to_table([_img(i, b) for i, b in det_boxes.items()], IMAGE_SCHEMA), gt)
    return det, dict(zip(gt.image_ids.tolist(), det.n_boxes.tolist()))


def _sgb(gt, preds, **kw):
    kw.setdefault("ks", (1,))
    return evaluate_recall(gt, preds, protocol="sgb", **kw)


CUP, TABLE = _box(0, 0, 9, 9, "cup"), _box(20, 20, 29, 29, "table")


def _iou_case(y2):
    # GT: cup (0,0)-(9,9) on table. The detected cup keeps x and the top edge and ends at y2.
    gt = _gt([_img("A", [CUP, TABLE], [_rel(0, 1, "on")])])
    det, nb = _sgdet(gt, {"A": [_box(0, 0, 9, y2, "cup"), _box(20, 20, 29, 29, "table")]})
    return _sgb(gt, _preds(gt, [("A", [_tri(0, 1, "on", .9)])], nb), detections=det).metrics["R@1"]


def test_iou_plus_one_exactly_half_links():
    # +1 convention: GT cup 10 x 10 = 100 px; detection (0,0)-(9,4) is 10 x 5 = 50 px, all inside:
    # IoU = 50 / (100 + 50 - 50) = 0.5 exactly, and SGB links at IoU >= 0.5 -> R@1 = 1.
    # Without +1: 9 x 4 = 36 over 9 x 9 = 81 -> 0.444, no link, R@1 = 0.
    assert float(sgb_iou(np.array([0, 0, 9, 9]), np.array([0, 0, 9, 4]))) == 0.5
    assert _iou_case(4.0) == 1.0


def test_iou_just_below_half_does_not_link():
    # y2 = 3.9: 10 x 4.9 = 49 px -> IoU = 49 / 100 = 0.49 < 0.5 -> R@1 = 0.
    assert float(sgb_iou(np.array([0, 0, 9, 9]), np.array([0, 0, 9, 3.9]))) == pytest.approx(0.49, abs=1e-6)
    assert _iou_case(3.9) == 0.0


def test_iou_is_computed_in_float32():
    # y2 = 4 - 2**-22, the float32 just below 4. Height + 1 = 5 - 2**-22 lies halfway between the
    # float32 neighbours 5 - 2**-21 and 5; round-to-even gives 5, so in float32 the IoU is
    # 50 / 100 = 0.5 and links. In float64 it is (50 - 10 * 2**-22) / 100 = 0.49999998, no link.
    y2 = 4 - 2.0 ** -22
    assert np.float32(y2) == y2
    assert float(sgb_iou(np.array([0, 0, 9, 9]), np.array([0, 0, 9, y2]))) == 0.5
    assert 10 * (y2 + 1) / 100 < 0.5  # the same IoU in float64
    assert _iou_case(y2) == 1.0


MAN, HORSE, HAT = _box(0, 0, 9, 9, "man"), _box(20, 20, 29, 29, "horse"), _box(40, 40, 49, 49, "hat")


def test_duplicate_gt_row_counts_twice():
    # GT rows: riding, riding (an exact repeat), wearing. One prediction finds riding.
    # SGB: both repeats are matched and counted -> R@1 = 2 / 3. Deduplicated (paper): 1 / 2.
    gt = _gt([_img("B", [MAN, HORSE, HAT], [_rel(0, 1, "riding"), _rel(0, 1, "riding"), _rel(0, 2, "wearing")])])
    preds = _preds(gt, [("B", [_tri(0, 1, "riding", .9)])])
    r = _sgb(gt, preds)
    assert r.metrics["R@1"] == pytest.approx(2 / 3)
    assert r.metrics["n_relations"] == 3 and r.protocol == "sgb"
    # mR: riding 2/2 = 1, wearing 0/1 = 0 -> (1 + 0) / 2
    assert r.metrics["mR@1"] == pytest.approx(0.5)
    assert evaluate_recall(gt, preds, ks=(1,)).metrics["R@1"] == pytest.approx(1 / 2)


def test_several_predicates_on_one_pair_and_unconstrained_top_k():
    # GT: man on horse, man near horse (two rows on one pair). Predictions: (0,1) on .9,
    # (0,1) near .8, (1,0) on .7.
    # Graph-constrained: a pair holds one slot with its best predicate: (0,1) on, then (1,0) on
    # -> R@2 = 1 / 2 (both rows count; merging them per pair would give 1).
    # Unconstrained: every (pair, predicate) entry ranks: on .9, near .8 -> R@2 = 2 / 2.
    gt = _gt([_img("C", [MAN, HORSE], [_rel(0, 1, "on"), _rel(0, 1, "near")])])
    preds = _preds(gt, [("C", [_tri(0, 1, "on", .9), _tri(0, 1, "near", .8), _tri(1, 0, "on", .7)])])
    assert _sgb(gt, preds, ks=(2,)).metrics["R@2"] == pytest.approx(0.5)
    assert _sgb(gt, preds, ks=(1, 2), graph_constrained=False).metrics["R@2"] == 1.0
    assert _sgb(gt, preds, ks=(1, 2), graph_constrained=False).metrics["R@1"] == pytest.approx(0.5)


def test_unconstrained_keeps_only_top_100():
    # One pair scores 150 predicates p0..p149 at 1 - i/1000; GT is p120, the 121st entry.
    # SGB cuts the unconstrained list at 100 before taking K: R@200 = 0 (uncut it would be 1).
    names = [f"p{i}" for i in range(150)]
    gt = _gt([_img("D", [MAN, HORSE], [_rel(0, 1, "p120")])])
    preds = _preds(gt, [("D", [_tri(0, 1, p, 1 - i / 1000) for i, p in enumerate(names)])])
    r = _sgb(gt, preds, ks=(100, 200), graph_constrained=False, predicates=names)
    assert r.metrics["R@200"] == 0.0


def test_detection_over_two_same_class_gt_objects_credits_both():
    # GT: person A (0,0)-(9,9) on bike, person B (0,0)-(9,11) on bike. Detected person (0,0)-(9,10):
    # IoU with A = 100 / 110 = 0.91, with B = 110 / 120 = 0.92; both >= 0.5 and both "person".
    # One prediction (person on bike) credits both GT rows: R@1 = 2 / 2 (one-to-one: 1 / 2).
    boxes = [_box(0, 0, 9, 9, "person"), _box(0, 0, 9, 11, "person"), _box(30, 30, 39, 39, "bike")]
    gt = _gt([_img("E", boxes, [_rel(0, 2, "on"), _rel(1, 2, "on")])])
    det, nb = _sgdet(gt, {"E": [_box(0, 0, 9, 10, "person"), _box(30, 30, 39, 39, "bike")]})
    preds = _preds(gt, [("E", [_tri(0, 1, "on", .9)])], nb)
    assert _sgb(gt, preds, detections=det).metrics["R@1"] == 1.0
    assert evaluate_recall(gt, preds, ks=(1,), detections=det).metrics["R@1"] == 0.5
    # labels must agree as well: the same box detected as "man" links to neither
    det2, _ = _sgdet(gt, {"E": [_box(0, 0, 9, 10, "man"), _box(30, 30, 39, 39, "bike")]})
    assert _sgb(gt, preds, detections=det2).metrics["R@1"] == 0.0


def test_predcls_links_gt_boxes_by_iou_and_label():
    # Same GT as above in predcls: the prediction names box A; B (IoU 100/120 = 0.83 with A, also
    # "person") is interchangeable with it, so both rows are found: R@1 = 1 (by index: 1 / 2).
    boxes = [_box(0, 0, 9, 9, "person"), _box(0, 0, 9, 11, "person"), _box(30, 30, 39, 39, "bike")]
    gt = _gt([_img("F", boxes, [_rel(0, 2, "on"), _rel(1, 2, "on")])])
    preds = _preds(gt, [("F", [_tri(0, 2, "on", .9)])])
    assert _sgb(gt, preds).metrics["R@1"] == 1.0
    assert evaluate_recall(gt, preds, ks=(1,), matcher="legacy").metrics["R@1"] == 0.5


def test_images_without_gt_or_without_predictions_are_skipped():
    # A: GT "on", found -> 1. B: GT "near", its row has no triplets. D: GT "near", no row at all.
    # C: predictions but no GT relation. SGB averages over A only: R@1 = 1 (counting B and D as
    # zero: 1 / 3). mR over the 2 label-set predicates: on = 1, near has no scored image -> 0,
    # so mR@1 = (1 + 0) / 2 = 0.5.
    gt = _gt([_img("A", [MAN, HORSE], [_rel(0, 1, "on")]), _img("B", [MAN, HORSE], [_rel(0, 1, "near")]),
              _img("C", [MAN, HORSE]), _img("D", [MAN, HORSE], [_rel(1, 0, "near")])])
    preds = _preds(gt, [("A", [_tri(0, 1, "on", .9)]), ("B", []), ("C", [_tri(0, 1, "on", .9)])])
    r = _sgb(gt, preds)
    assert r.metrics["R@1"] == 1.0 and r.metrics["n_images_scored"] == 1
    assert r.metrics["mR@1"] == pytest.approx(0.5)
    assert evaluate_recall(gt, preds, ks=(1,)).metrics["R@1"] == pytest.approx(1 / 3)


def test_predicate_absent_from_gt_counts_zero_in_mean_recall():
    # Label set on, near, under; GT has on and near, both found. mR@1 = (1 + 1 + 0) / 3
    # (the mean over predicates with GT would be 1).
    gt = _gt([_img("G", [MAN, HORSE], [_rel(0, 1, "on")]), _img("H", [MAN, HORSE], [_rel(0, 1, "near")])])
    preds = _preds(gt, [("G", [_tri(0, 1, "on", .9)]), ("H", [_tri(0, 1, "near", .9)])])
    r = _sgb(gt, preds, predicates=["on", "near", "under"])
    assert r.metrics["R@1"] == 1.0 and r.metrics["mR@1"] == pytest.approx(2 / 3)
    assert r.per_predicate[1]["under"] == 0.0 and r.metrics["n_predicates"] == 3
    with pytest.raises(ValueError, match="not in the label set"):
        _sgb(gt, preds, predicates=["on"])


def test_ranking_multiplies_object_scores():
    # sgcls: GT boxes with predicted labels and scores 0.5, 0.5, 1, 1. GT: box 2 on box 3.
    # (0,1) on: .9 x .5 x .5 = .225; (2,3) on: .5 x 1 x 1 = .5 -> (2,3) ranks first, R@1 = 1
    # (ranked by the predicate score alone, (0,1) would take the only slot: R@1 = 0).
    boxes = [MAN, HORSE, HAT, _box(60, 60, 69, 69, "head")]
    gt = _gt([_img("I", boxes, [_rel(2, 3, "on")])])
    det = Detections(gt.box_offsets, gt.boxes, gt.categories)
    preds = _preds(gt, [("I", [_tri(0, 1, "on", .9), _tri(2, 3, "on", .5)])])
    scores = np.array([.5, .5, 1, 1])
    assert _sgb(gt, preds, detections=det, object_scores=scores).metrics["R@1"] == 1.0
    assert _sgb(gt, preds, detections=det).metrics["R@1"] == 0.0
    # a wrongly predicted label on box 3 loses the relation
    det_wrong = Detections(gt.box_offsets, gt.boxes, np.array(["man", "horse", "hat", "hand"], dtype=object))
    assert _sgb(gt, preds, detections=det_wrong, object_scores=scores).metrics["R@1"] == 0.0


def test_ties_graph_constrained():
    # Equal scores .5 on pairs (1,2) (listed first) and (0,1) (GT). Ties keep file order: (1,2)
    # takes rank 0, R@1 = 0, R@2 = 1 (by pair index or a reversed sort, (0,1) would come first).
    gt = _gt([_img("J", [MAN, HORSE, HAT], [_rel(0, 1, "on")])])
    preds = _preds(gt, [("J", [_tri(1, 2, "on", .5), _tri(0, 1, "on", .5)])])
    r = _sgb(gt, preds, ks=(1, 2))
    assert (r.metrics["R@1"], r.metrics["R@2"]) == (0.0, 1.0)
    # within a pair equal predicate scores go to the lowest label index (SGB's argmax):
    # label set (on, near); near is listed first in the file but on wins the pair's slot -> R@1 = 1
    preds = _preds(gt, [("J", [_tri(0, 1, "near", .6), _tri(0, 1, "on", .6)])])
    assert _sgb(gt, preds, predicates=["on", "near"]).metrics["R@1"] == 1.0
    assert _sgb(gt, preds, predicates=["near", "on"]).metrics["R@1"] == 0.0


def test_ties_unconstrained():
    # One pair, near and on both .5, GT near. Entries of equal score follow the label index:
    # label set (on, near) -> on first, R@1 = 0; file order (near listed first) would give 1.
    gt = _gt([_img("K", [MAN, HORSE], [_rel(0, 1, "near")])])
    preds = _preds(gt, [("K", [_tri(0, 1, "near", .5), _tri(0, 1, "on", .5)])])
    r = _sgb(gt, preds, ks=(1, 2), graph_constrained=False, predicates=["on", "near"])
    assert (r.metrics["R@1"], r.metrics["R@2"]) == (0.0, 1.0)


def test_protocol_is_recorded_and_checked():
    gt = _gt([_img("L", [MAN, HORSE], [_rel(0, 1, "on")])])
    preds = _preds(gt, [("L", [_tri(0, 1, "on", .9)])])
    assert evaluate_recall(gt, preds, ks=(1,)).to_dict()["protocol"] == "paper"
    assert _sgb(gt, preds).to_dict()["protocol"] == "sgb"
    with pytest.raises(ValueError, match="unknown protocol"):
        evaluate_recall(gt, preds, protocol="motifs")
    with pytest.raises(ValueError, match="many-to-many"):
        evaluate_recall(gt, preds, protocol="sgb", matcher="one_to_one")


def _reference(images, det, det_scores, ks, gc, labels):
    """SGB's rules as a plain loop per image: the slow, obvious reading the vectorised code must equal."""
    per_img, hits_by_pred = [], {p: [] for p in labels}
    for (gboxes, gcat, rels, tris), (dboxes, dcat), sc in zip(images, det, det_scores):
        if not rels or not tris:
            continue
        pairs = list(dict.fromkeys((s, o) for s, o, _, _ in tris))
        table = {(s, o, p): np.float32(x) for s, o, p, x in tris}
        if gc:
            best = {}
            for s, o in pairs:
                cand = [(table[(s, o, p)], -labels.index(p), p) for p in labels if (s, o, p) in table]
                best[(s, o)] = max(cand)[2]
            trip = [(s, o, best[(s, o)], (table[(s, o, best[(s, o)])] * sc[s]) * sc[o]) for s, o in pairs]
            order = sorted(range(len(trip)), key=lambda i: -trip[i][3])
            ranked = [trip[i][:3] for i in order]
        else:
            ent = [(s, o, p, (sc[s] * sc[o]) * table[(s, o, p)], pi, li) for pi, (s, o) in enumerate(pairs)
                   for li, p in enumerate(labels) if (s, o, p) in table]
            gcs = _reference_gc_rank(pairs, table, sc, labels)
            ranked = [e[:3] for e in sorted(ent, key=lambda e: (-e[3], gcs[(e[0], e[1])], e[5]))][:100]
        found = [set() for _ in ks]
        for j, (gs, go, gp) in enumerate(rels):
            for r, (s, o, p) in enumerate(ranked):
                if p == gp and dcat[s] == gcat[gs] and dcat[o] == gcat[go] \
                        and sgb_iou(dboxes[s], gboxes[gs]) >= .5 and sgb_iou(dboxes[o], gboxes[go]) >= .5:
                    for ki, k in enumerate(ks):
                        if r < k:
                            found[ki].add(j)
        per_img.append([len(f) / len(rels) for f in found])
        for p in set(r[2] for r in rels):
            idx = [j for j, r in enumerate(rels) if r[2] == p]
            hits_by_pred[p].append([len([j for j in idx if j in f]) / len(idx) for f in found])
    R = np.mean(per_img, axis=0)
    mR = np.sum([np.mean(v, axis=0) if v else np.zeros(len(ks)) for v in hits_by_pred.values()], axis=0) / len(labels)
    return R, mR


def _reference_gc_rank(pairs, table, sc, labels):
    trip = []
    for s, o in pairs:
        x, li = max((table[(s, o, p)], -labels.index(p)) for p in labels if (s, o, p) in table)
        trip.append((x * sc[s]) * sc[o])
    order = sorted(range(len(pairs)), key=lambda i: -trip[i])
    return {pairs[i]: r for r, i in enumerate(order)}


@pytest.mark.parametrize("gc", [True, False])
def test_matches_a_loop_reference_on_random_sgdet(gc):
    rng = np.random.default_rng(7)
    labels, cats, ks = ["on", "near", "has", "under"], ["a", "b", "c"], (3, 10, 30)
    images, det, det_scores, gt_rows, det_rows = [], [], [], [], []
    for i in range(30):
        ng, nd = int(rng.integers(2, 6)), int(rng.integers(2, 7))
        gb = np.round(rng.uniform(0, 40, (ng, 2)), 1)
        gboxes = np.concatenate([gb, gb + rng.integers(5, 30, (ng, 2))], 1).astype(np.float32)
        src = np.concatenate([np.arange(ng), rng.integers(0, ng, nd)])  # every GT box detected, some twice
        db = gboxes[src] + rng.normal(0, 2, (src.size, 4)).astype(np.float32)
        gcat = list(rng.choice(cats, ng))
        dcat = [gcat[j] if rng.uniform() < .8 else str(rng.choice(cats)) for j in src]
        rels = [(int(rng.integers(ng)), int(rng.integers(ng)), str(rng.choice(labels)))
                for _ in range(rng.integers(0, 5))]
        tris = {(s, o, p): float(rng.uniform()) for s, o, p in rels if rng.uniform() < .8}
        tris.update({(int(rng.integers(src.size)), int(rng.integers(src.size)), str(rng.choice(labels))):
                     float(rng.uniform()) for _ in range(rng.integers(0, 12))})
        tris = [(s, o, p, x) for (s, o, p), x in tris.items() if s != o]
        rels = [r for r in rels if r[0] != r[1]]
        rels += rels[:1] if i % 3 == 0 else []  # exact repeats
        sc = rng.uniform(.2, 1, src.size).astype(np.float32)
        images.append((gboxes, gcat, rels, tris)), det.append((db, dcat)), det_scores.append(sc)
        gt_rows.append(_img(f"i{i}", [_box(*map(float, b), c) for b, c in zip(gboxes, gcat)], [_rel(*r) for r in rels]))
        det_rows.append((f"i{i}", [_box(*map(float, b), c) for b, c in zip(db, dcat)]))
    gt = _gt(gt_rows)
    dets, nb = _sgdet(gt, dict(det_rows))
    preds = _preds(gt, [(f"i{i}", [_tri(*t) for t in im[3]]) for i, im in enumerate(images)], nb)
    r = _sgb(gt, preds, ks=ks, graph_constrained=gc, detections=dets, predicates=labels,
             object_scores=np.concatenate(det_scores))
    R, mR = _reference(images, [(d[0].astype(np.float32), d[1]) for d in det], det_scores, ks, gc, labels)
    assert R[-1] > 0.3 and mR[-1] > 0.2  # the random graphs do find relations
    assert [r.metrics[f"R@{k}"] for k in ks] == pytest.approx(list(R))
    assert [r.metrics[f"mR@{k}"] for k in ks] == pytest.approx(list(mR))


def test_ovsgg_config_runs_the_sgb_protocol(tmp_path):
    import pyarrow.parquet as pq

    from eval_jobs.ovsgg import BenchmarkSpec, OVSGGConfig
    from eval_jobs.ovsgg_cells import load_benchmark, score_cell

    with pytest.raises(ValueError, match="many-to-many"):
        OVSGGConfig(protocol="sgb", matcher="one_to_one")
    with pytest.raises(ValueError, match="protocol"):
        OVSGGConfig(protocol="motifs")
    # image M: man on horse (found), man near horse (missed); image N has no predictions -> skipped
    images = [_img("M", [MAN, HORSE], [_rel(0, 1, "on"), _rel(0, 1, "near")]),
              _img("N", [MAN, HORSE], [_rel(0, 1, "on")])]
    pq.write_table(to_table(images, CORPUS_SCHEMA), tmp_path / "c.parquet")
    spec = BenchmarkSpec(name="b", axis="A1", reader="parquet", path=str(tmp_path / "c.parquet"))
    preds = to_table([{"image_id": "M", "triplets": [_tri(0, 1, "on", .9)]}], PREDICTIONS_SCHEMA)
    cell = score_cell(spec, load_benchmark(spec), preds, OVSGGConfig(benchmarks=[spec], protocol="sgb", ks=[50],
                                                                        headline_k=50))
    rec = cell["recall"]
    assert rec["protocol"] == "sgb" and rec["matcher"] == "legacy"
    assert rec["metrics"]["R@50"] == pytest.approx(0.5)   # M only: 1 of 2
    assert rec["metrics"]["mR@50"] == pytest.approx(0.5)  # (on 1 + near 0) / 2


@pytest.mark.parametrize("gc", [True, False])
def test_dense_ranking_on_images_larger_than_k(gc):
    """sgb_rank_dense sorts only what can reach the top K (a per-image partition first); on images
    larger than K, with tied scores and zero and negative object scores, it ranks exactly as a
    full sort of every pair (graph-constrained) or every entry (unconstrained) per image does."""
    from relate.metrics.sgb import SGB_NOGC_CAP, sgb_rank_dense

    rng = np.random.default_rng(3)
    sizes = np.array([0, 1, 60, 99, 100, 101, 240, 700])
    P = 7
    off = np.concatenate([[0], np.cumsum(sizes)])
    image = np.repeat(np.arange(sizes.size), sizes)
    scores = (np.round(rng.random((off[-1], P)) * 8) / 8).astype(np.float32)  # many ties
    s, o = ((np.round(rng.random(off[-1]) * 4) / 4).astype(np.float32) for _ in range(2))
    s[rng.random(s.size) < .1] = -0.5
    for k in (1, 20, 100, 150):
        pr, col, rank = sgb_rank_dense(off, image, s, o, scores, graph_constrained=gc, max_k=k)
        got = sorted(zip(image[pr].tolist(), rank.tolist(), pr.tolist(), col.tolist()))
        want = []
        for i in range(sizes.size):
            rows = range(off[i], off[i + 1])
            best = {r: int(np.argmax(scores[r])) for r in rows}
            gc_order = sorted(rows, key=lambda r: (-((scores[r, best[r]] * s[r]) * o[r]), r))
            if gc:
                want += [(i, n, r, best[r]) for n, r in enumerate(gc_order[:k])]
                continue
            place = {r: n for n, r in enumerate(gc_order)}
            entries = sorted(((r, c) for r in rows for c in range(P)),
                             key=lambda e: (-((s[e[0]] * o[e[0]]) * scores[e]), place[e[0]], e[1]))
            want += [(i, n, r, c) for n, (r, c) in enumerate(entries[:min(k, SGB_NOGC_CAP)])]
        assert got == sorted(want)
