"""Object labels count whenever a system predicts them (sgcls, sgdet), and label-agnostic scoring is
an explicit choice that the results name; a label-free system's output keeps working and says so.

Hand-worked cases first (numbers in the comments), then random sgcls outputs whose label-scored
recall is checked against a per-image count written independently of the evaluator.
"""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

from _rows import box as _box, img as _img, rel as _rel, tri as _tri
from relate.metrics import evaluate_scene_graphs, load_ground_truth, load_scene_graphs
from relate.schema import CORPUS_SCHEMA, IMAGE_SCHEMA, PREDICTIONS_SCHEMA, scene_graphs_schema, to_table

MAN, HORSE, HAT = (0, 0, 9, 9), (20, 20, 29, 29), (40, 40, 49, 49)
GT_IMAGE = _img("A", [_box(*MAN, "man"), _box(*HORSE, "horse"), _box(*HAT, "hat")],
                [_rel(0, 1, "on"), _rel(0, 2, "wearing")])


def _obj(x1, y1, x2, y2, label, score=1.0):
    return {"x1": x1, "y1": y1, "x2": x2, "y2": y2, "label": label, "score": score}


def _sg_table(rows):
    return to_table([{"image_id": i, "objects": objs, "pairs": [], "pair_scores": [], "triplets": t}
                     for i, objs, t in rows], scene_graphs_schema(["on", "near", "holding", "wearing"]), table="sg")


def _sgcls(labels):
    """The GT boxes of image A with ``labels`` predicted, and both GT triplets ranked 1st and 2nd."""
    objs = [_obj(*b, lab) for b, lab in zip((MAN, HORSE, HAT), labels)]
    return _sg_table([("A", objs, [_tri(0, 1, "on", .9), _tri(0, 2, "wearing", .8)])])


def _recall(gt, table, k=2, **kw):
    r = evaluate_scene_graphs(gt, load_scene_graphs(table, gt), ks=(k,), **kw)
    return r.metrics[f"R@{k}"], r.object_labels


def test_sgcls_scores_its_predicted_labels_by_default():
    gt = load_ground_truth(to_table([GT_IMAGE], CORPUS_SCHEMA))
    # the horse is called a dog: with labels, box 1 links to no GT box, so "man on horse" is lost and
    # only "man wearing hat" is found: R@2 = 1/2. Label-agnostic, IoU 1 links it anyway: R@2 = 2/2.
    wrong = _sgcls(["man", "dog", "hat"])
    assert _recall(gt, wrong) == (0.5, "scored")
    assert _recall(gt, wrong, require_category=False) == (1.0, "agnostic")
    assert _recall(gt, wrong, require_category=True) == (0.5, "scored")
    # labels compare without case (the box matcher's rule): right labels find both
    assert _recall(gt, _sgcls(["Man", "horse", "hat"])) == (1.0, "scored")
    # sgb links by label too, and refuses to be asked otherwise
    assert _recall(gt, wrong, protocol="sgb")[1] == "scored"
    with pytest.raises(ValueError, match="'paper' option"):
        _recall(gt, wrong, protocol="sgb", require_category=False)


def test_a_label_free_file_is_scored_label_agnostic_and_says_so():
    gt = load_ground_truth(to_table([GT_IMAGE], CORPUS_SCHEMA))
    free = _sgcls([None, None, None])
    assert _recall(gt, free) == (1.0, "agnostic")
    with pytest.raises(ValueError, match="no object carries a label"):
        _recall(gt, free, require_category=True)
    with pytest.raises(ValueError, match="2 object\\(s\\) carry a label and 1 do not"):
        _recall(gt, _sgcls(["man", None, "hat"]))
    # asked explicitly, the unlabelled horse links to nothing: "on" lost, R@2 = 1/2
    assert _recall(gt, _sgcls(["man", None, "hat"]), require_category=True) == (0.5, "scored")


def test_random_sgcls_with_labels_recalls_less_than_label_agnostic():
    """Disjoint GT boxes, every GT triplet predicted (so label-agnostic recall is 1), labels right
    with probability 0.6: a GT triplet is found with labels exactly when both of its boxes are
    labelled right, so R@K is the mean over images of that share, counted here box by box."""
    rng = np.random.default_rng(7)
    cats, preds = ["man", "horse", "hat", "cup", "dog"], ["on", "near", "holding"]
    gt_rows, sg_rows, expected = [], [], []
    for i in range(40):
        n = int(rng.integers(2, 6))
        boxes = [(10 * k, 0, 10 * k + 8, 8) for k in range(n)]  # disjoint: a box overlaps only itself
        truth = [cats[int(c)] for c in rng.integers(len(cats), size=n)]
        said = [t if rng.random() < 0.6 else cats[(cats.index(t) + 1) % len(cats)] for t in truth]
        pairs = [(s, o) for s in range(n) for o in range(n) if s != o]
        pick = rng.choice(len(pairs), size=min(3, len(pairs)), replace=False)
        rels = [(pairs[j][0], pairs[j][1], preds[int(rng.integers(len(preds)))]) for j in pick]
        gt_rows.append(_img(f"i{i}", [_box(*b, c) for b, c in zip(boxes, truth)], [_rel(*r) for r in rels]))
        sg_rows.append((f"i{i}", [_obj(*b, c) for b, c in zip(boxes, said)],
                        [_tri(s, o, p, float(rng.random())) for s, o, p in rels]))
        expected.append(np.mean([said[s] == truth[s] and said[o] == truth[o] for s, o, _ in rels]))
    gt = load_ground_truth(to_table(gt_rows, CORPUS_SCHEMA))
    table = _sg_table(sg_rows)
    with_labels, how = _recall(gt, table, k=10)  # K above any image's 3 predictions: every one counts
    agnostic, how_not = _recall(gt, table, k=10, require_category=False)
    assert (how, how_not) == ("scored", "agnostic")
    assert agnostic == 1.0
    assert with_labels == pytest.approx(float(np.mean(expected)))
    assert 0.2 < with_labels < 0.6  # about 0.6 squared: clearly below the label-agnostic figure


def test_ovsgg_cells_name_how_labels_were_used_in_results_and_table(tmp_path):
    """An sgcls file scores labels; this project's label-free model (plain triplets on the GT boxes
    for A1, on the shared detector's boxes for A4) keeps working and is named label-agnostic."""
    from eval_jobs.ovsgg import BenchmarkSpec, OVSGGConfig
    from eval_jobs.ovsgg_cells import load_benchmark, score_cell
    from eval_jobs.report import table_rows

    pq.write_table(to_table([GT_IMAGE], CORPUS_SCHEMA), tmp_path / "c.parquet")
    pq.write_table(_sgcls(["man", "dog", "hat"]), tmp_path / "sgcls.parquet")
    pq.write_table(to_table([{"image_id": "A", "uri": "m", "width": 100, "height": 100, "source": "t", "split": "test",
                              "boxes": [_box(*MAN, "person"), _box(*HORSE, "zebra")]}], IMAGE_SCHEMA),
                   tmp_path / "det.parquet")
    ours = to_table([{"image_id": "A", "triplets": [_tri(0, 1, "on", .9)]}], PREDICTIONS_SCHEMA)
    a1 = BenchmarkSpec(name="a1", axis="A1", reader="parquet", path=str(tmp_path / "c.parquet"))
    a4 = BenchmarkSpec(name="a4", axis="A4", reader="parquet", path=str(tmp_path / "c.parquet"),
                       detections=str(tmp_path / "det.parquet"))
    cfg = OVSGGConfig(benchmarks=[a1, a4], ks=[2], headline_k=2, bootstrap={"resamples": 0})
    sgcls = score_cell(a1, load_benchmark(a1), str(tmp_path / "sgcls.parquet"), cfg)
    ours_a1 = score_cell(a1, load_benchmark(a1), ours, cfg)
    ours_a4 = score_cell(a4, load_benchmark(a4), ours, cfg)
    assert sgcls["recall"]["object_labels"] == "scored" and sgcls["recall"]["metrics"]["R@2"] == 0.5
    # ours: man on horse found by box index (A1) and through the detector's boxes, whose classes
    # (person, zebra) are the detector's, not the model's, and do not gate the link (A4)
    assert ours_a1["recall"]["object_labels"] == "agnostic" and ours_a1["recall"]["metrics"]["R@2"] == 0.5
    assert ours_a4["recall"]["object_labels"] == "agnostic" and ours_a4["recall"]["metrics"]["R@2"] == 0.5
    result = {"systems": {"s": {"cells": {"a1": sgcls, "a4": ours_a4}, "axes": {}, "composite": None}}}
    notes = [r[-1] for r in table_rows(result, [("a1", "A1"), ("a4", "A4")], 2)[:2]]
    assert notes[0] == "object labels scored" and notes[1].startswith("label-agnostic; pair-recall ceiling")
    with pytest.raises(ValueError, match="label-agnostic scoring"):
        OVSGGConfig(benchmarks=[a1.model_copy(update={"require_category": False})], protocol="sgb")


def test_convert_takes_label_agnostic_scoring_as_a_paper_option():
    from eval_jobs.convert import parse_args

    argv = ["--from", "vlm", "--input", "x.jsonl", "--out", "o.parquet", "--benchmark-reader", "vg150",
            "--benchmark-path", "vg", "--score", "--require-category", "false"]
    assert parse_args(argv + ["--protocol", "paper"]).require_category is False
    with pytest.raises(SystemExit):  # sgb links by label: the CLI names the clash and exits
        parse_args(argv)
