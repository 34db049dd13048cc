"""Scoring against the world's full truth: hand-worked AP / top-k cases, and the truth's source.

The AP figures below are worked by hand from the definition (precision at each true cell's rank,
averaged over the true cells; tied cells enter together) rather than read off our own code.
"""

from __future__ import annotations

import numpy as np
import pytest

from relate.data.synthetic import SyntheticConfig, make_scene
from relate.metrics.truth import ImageCells, score_against_truth

pytestmark = pytest.mark.unit

CONCEPTS = ["left_of", "right_of", "near"]
FAMILY = {"left_of": "spatial", "right_of": "spatial", "near": "proximity"}
# three boxes; the pair (2, 1) was dropped by the sampler (never scored)
PAIRS = np.array([[0, 1], [0, 2], [1, 0], [1, 2], [2, 0]])
SCORES = np.array([  # left_of, right_of, near
    [3.0, -5.0, 0.1],
    [2.0, -5.0, 0.9],
    [1.0, 2.2, 0.2],
    [2.5, -5.0, -1.0],
    [0.5, -5.0, 0.8],
])
TRUTH = frozenset({(0, 1, "left_of"), (1, 2, "left_of"), (2, 1, "left_of"), (1, 0, "right_of"),
                   (0, 2, "near"), (2, 0, "near")})


def _report(k=10, extra=()):
    return score_against_truth([ImageCells(PAIRS, SCORES, 3, TRUTH), *extra], CONCEPTS, FAMILY, k=k)


def test_family_and_concept_ap_by_hand():
    rep = _report()
    # left_of: T(3.0) T(2.5) F F F, then the unscored true cell last, alone at the bottom: 6 cells
    # there, 3 true -> AP = (1 + 1 + 3/6) / 3
    assert rep.concept_ap["left_of"] == pytest.approx((1 + 1 + 0.5) / 3)
    assert rep.concept_ap["right_of"] == pytest.approx(1.0)
    # near: T(0.9) T(0.8) on top -> 1.0
    assert rep.family_ap["proximity"] == pytest.approx(1.0)
    # spatial pools 12 cells: T 3.0, T 2.5, T 2.2, then 5 false, 4 at -5, and the two unscored cells
    # (one true) tied at the bottom where all 12 cells are in: 3/4 * 1 + 1/4 * 4/12
    assert rep.family_ap["spatial"] == pytest.approx(0.75 + 0.25 * 4 / 12)
    assert rep.positives == {"spatial": 4, "proximity": 2}
    # true ordered pairs: (0,1) (1,2) (2,1) (1,0) (0,2) (2,0), of which (2,1) was not kept
    assert rep.pair_coverage == pytest.approx(5 / 6)


def test_finding_a_familys_pairs_by_hand():
    """Pair AP ranks each ordered pair by its best cell of the family against whether any of the
    family's concepts holds there. Spatial: (0,1) 3.0 T, (1,2) 2.5 T, (1,0) 2.2 T, (0,2) 2.0 F,
    (2,0) 0.5 F, and the unscored (2,1) T alone at the bottom: (1 + 1 + 1 + 4/6) / 4 -- above the
    cell AP, since the pair (1,0) is found although its left_of cell ranks high and is false."""
    rep = _report()
    assert rep.family_pair_ap["spatial"] == pytest.approx((3 + 4 / 6) / 4)
    assert rep.family_pair_ap["proximity"] == pytest.approx(1.0)
    assert rep.flat()["truth/family/spatial_pair_ap"] == pytest.approx((3 + 4 / 6) / 4)


def test_topk_precision_by_hand():
    assert _report(k=3).topk_precision == pytest.approx(1.0)  # 3.0, 2.5, 2.2: all true
    assert _report(k=4).topk_precision == pytest.approx(3 / 4)  # then 2.0 (left_of 0->2) is false
    # an image with one true relation, ranked first: min(k, 1) = 1 cell counts -> precision 1
    one = ImageCells(np.array([[0, 1], [1, 0]]), np.array([[0.0, 0.0, 5.0], [0.0, 0.0, -1.0]]), 2,
                     frozenset({(0, 1, "near")}))
    assert _report(k=4, extra=[one]).topk_precision == pytest.approx((3 / 4 + 1.0) / 2)


def test_recall_within_count_by_hand():
    rep = _report()
    # 6 true cells -> the 6 best: 3.0 T, 2.5 T, 2.2 T, 2.0 F, 1.0 F, 0.9 T(near); the unscored true
    # left_of and the true near at 0.8 fall outside
    assert rep.count_recall == pytest.approx(4 / 6)
    assert rep.family_count_recall == pytest.approx({"spatial": 3 / 4, "proximity": 1 / 2})


def test_direction_accuracy_by_hand():
    inverse = {"left_of": "right_of", "right_of": "left_of", "near": None}
    rep = score_against_truth([ImageCells(PAIRS, SCORES, 3, TRUTH)], CONCEPTS, FAMILY, inverse_of=inverse)
    # true left_of on (0,1): 3.0 > -5 yes; (1,2): 2.5 > -5 yes; (2,1): unscored, -inf vs -inf: a tie, wrong;
    # true right_of on (1,0): 2.2 > 1.0 yes -> 3 of 4; near has no inverse
    assert rep.family_direction == {"spatial": pytest.approx(3 / 4)}
    tied = ImageCells(np.array([[0, 1]]), np.array([[1.0, 1.0, 0.0]]), 2, frozenset({(0, 1, "left_of")}))
    assert score_against_truth([tied], CONCEPTS, FAMILY, inverse_of=inverse).family_direction == {"spatial": 0.0}


def test_ties_count_against_the_model():
    cells = ImageCells(np.array([[0, 1], [1, 0]]), np.zeros((2, 3)), 2, frozenset({(0, 1, "near")}))
    assert score_against_truth([cells], CONCEPTS, FAMILY, k=1).topk_precision == 0.0


def test_annotation_coverage_by_hand():
    from relate.metrics.truth import annotation_coverage

    truth = [{(0, 1, "left_of"), (1, 0, "right_of"), (0, 1, "near"), (1, 0, "near")}]
    # left_of stated once (its reverse counts too), near not at all, one false right_of
    stated = [{(0, 1, "left_of"), (0, 1, "right_of")}]
    cov = annotation_coverage(stated, truth, FAMILY, {"left_of": "right_of", "right_of": "left_of", "near": None},
                              symmetric=["near"])
    # (0,1,right_of) is false, but its reverse (1,0,left_of) is not in the truth either
    assert cov["spatial"] == {"truth": 2, "covered": 1.0, "stated": 2, "not_true": 0.5}
    assert cov["proximity"]["covered"] == 0.0 and cov["proximity"]["stated"] == 0
    stated = [{(1, 0, "near")}]
    assert annotation_coverage(stated, truth, FAMILY, {"near": None}, ["near"])["proximity"]["covered"] == 1.0


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="'touching' is not among"):
        score_against_truth([ImageCells(PAIRS, SCORES, 3, frozenset({(0, 1, "touching")}))], CONCEPTS, FAMILY)
    with pytest.raises(ValueError, match="expected \\(5, 3\\)"):
        score_against_truth([ImageCells(PAIRS, SCORES[:, :2], 3, TRUTH)], CONCEPTS, FAMILY)
    with pytest.raises(ValueError, match="without a family"):
        score_against_truth([ImageCells(PAIRS, SCORES, 3, TRUTH)], CONCEPTS, {"near": "proximity"})


def test_world_truth_regenerates_each_scene(tmp_path):
    from relate.config import dump_config
    from relate.data.corpus import read_corpus
    from relate.data.synthetic_corpus import write_corpus
    from relate.data.world_truth import world_truth

    world = SyntheticConfig(seed=3, num_scenes=6, min_size=64, max_size=96)
    write_corpus(tmp_path, world)
    dump_config(world, tmp_path / "synthetic_config.yaml")
    table = read_corpus(tmp_path, "train")
    ids = table.column("image_id").to_pylist()
    truth = world_truth(tmp_path, ids, table.column("boxes").to_pylist())
    for image_id, (t, n) in zip(ids, truth):
        scene = make_scene(int(image_id.rsplit("-", 1)[1]), world)
        assert t == {(r["subject"], r["object"], r["concept"]) for r in scene.true_relations}
        assert {(r["subject"], r["object"]) for r in scene.relations} <= {(s, o) for s, o, _ in t}
        assert n == len(scene.boxes)
    # a box appended after the world's own (annotation's duplicate people) is allowed, one missing is not
    grown = [list(b) + [dict(b[0])] for b in table.column("boxes").to_pylist()]
    assert [n for _, n in world_truth(tmp_path, ids, grown)] == [len(b) - 1 for b in grown]
    with pytest.raises(ValueError, match="differ from the world"):
        world_truth(tmp_path, ids[:1], [table.column("boxes").to_pylist()[0][:-1]])
    # a corpus from another world is refused: other seed, or same seed with other boxes
    with pytest.raises(ValueError, match="seed 3"):
        world_truth(tmp_path, ["synth-4-0000000"])
    other = SyntheticConfig(seed=3, num_scenes=6, min_size=100, max_size=120)
    dump_config(other, tmp_path / "synthetic_config.yaml")
    with pytest.raises(ValueError, match="differ from the world"):
        world_truth(tmp_path, ids, table.column("boxes").to_pylist())


def test_full_coverage_states_the_whole_truth_over_the_same_images():
    plain, full = SyntheticConfig(seed=1), SyntheticConfig(seed=1, coverage="full")
    for i in range(20):
        a, b = make_scene(i, plain), make_scene(i, full)
        assert np.array_equal(a.image, b.image) and a.boxes == b.boxes
        assert sorted((r["subject"], r["object"], r["concept"]) for r in b.relations) == \
            sorted((r["subject"], r["object"], r["concept"]) for r in a.true_relations)
    with pytest.raises(ValueError, match="coverage 'full'"):
        SyntheticConfig(coverage="full", multi_label=0.3)


def test_a_twin_reverses_brightness_and_depth_and_keeps_everything_else():
    """The learnability check's pixel control rests on this: same boxes, brightness relations all
    reversed (complement colours keep each gap), depth reversed between groups (a person's held cup
    stays in front of its person), every other relation unchanged."""
    world = SyntheticConfig(seed=0, coverage="full")
    flipped = depth = 0
    for i in range(40):
        a, b = make_scene(i, world), make_scene(i, world, twin=True)
        assert a.boxes == b.boxes and b.image_id == a.image_id + "-twin" and not np.array_equal(a.image, b.image)
        ta = {(r["subject"], r["object"], r["concept"]) for r in a.true_relations}
        tb = {(r["subject"], r["object"], r["concept"]) for r in b.true_relations}
        pixel = ("in_front_of", "behind", "brighter_than", "darker_than")
        assert {t for t in ta if t[2] not in pixel} == {t for t in tb if t[2] not in pixel}
        for s, o, c in ta:
            if c == "brighter_than":
                assert (o, s, c) in tb and (s, o, c) not in tb
            if c == "in_front_of":
                depth += 1
                flipped += (o, s, c) in tb and (s, o, c) not in tb
    assert depth > 30 and flipped >= 0.85 * depth  # 35 of 39: the rest lie within one group
    with pytest.raises(ValueError, match="coverage 'full'"):
        make_scene(0, SyntheticConfig(seed=0), twin=True)
