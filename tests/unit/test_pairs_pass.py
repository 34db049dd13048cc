"""The pairs pass: a VLM asked for every relation of a few sampled pairs, and what the corpus keeps of it.

Checked against the synthetic world's own rules (``relate.data.world_truth``): with the scripted
annotator's errors off, what the pass leaves in the corpus about each asked pair, closed under
converse and together with what the other passes said of it, is exactly what holds there; the asked pairs are the seeded uniform sample; and the gate
holds the pass's layout relations to the spatial pass's rules and the rest to the semantic ones."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from PIL import Image

from pipelines.annotate import AnnotateConfig, annotate_local
from relate.config import dump_config
from relate.data.lexicon import SURFACE_TO_CONCEPT
from relate.data.synthetic import SyntheticConfig, make_scene
from relate.data.synthetic_truth import close_relations
from relate.data.world_truth import world_truth
from relate.gate import BoxTable, Candidates, gate_relations
from relate.pair_sample import sample_pairs

pytestmark = pytest.mark.unit


def test_sample_pairs_is_seeded_uniform_and_skips_body_parts():
    boxes = [{"is_body_part": False}] * 5 + [{"is_body_part": True}]
    every = sample_pairs("img", boxes, 100)
    assert every == [(a, b) for a in range(5) for b in range(a + 1, 5)]  # no pair with box 5, the body part
    four = sample_pairs("img", boxes, 4, seed=3)
    assert len(four) == 4 and set(four) <= set(every) and four == sorted(four)
    assert four == sample_pairs("img", boxes, 4, seed=3) and sample_pairs("img", boxes, 0) == []
    # uniform: over many images each of the 10 pairs is drawn about 4 / 10 of the time
    counts = np.zeros(10)
    for i in range(2000):
        for p in sample_pairs(f"i{i}", boxes, 4):
            counts[every.index(p)] += 1
    assert np.all(np.abs(counts / 2000 - 0.4) < 0.05)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("world")
    cfg = SyntheticConfig(seed=0, num_scenes=24)
    dump_config(cfg, root / "synthetic_config.yaml")
    rows = []
    for i in range(24):
        s = make_scene(i, cfg)
        uri = root / f"{s.image_id}.png"
        Image.fromarray(s.image).save(uri)
        row = s.to_record(str(uri), "train")
        row["reference"] = row.pop("relations")
        rows.append(dict(row, shard="train/part-00000"))
    return root, pa.Table.from_pylist(rows)


def test_what_the_pass_leaves_of_an_asked_pair_is_what_holds_there(world):
    root, records = world
    errors_off = {k: 0.0 for k in ("contact_disjoint", "containment_no_overlap", "proximity_far", "wrong_direction",
                                   "not_layout", "body_part_spatial", "body_part_subject", "body_part_object",
                                   "semantic_disjoint", "person_duplicate", "bad_index", "repeated_pair", "depth_flip",
                                   "malformed_json")}
    cfg = AnnotateConfig(input_dir=str(root), pairs_per_image=4, vlm={"backend": "scripted",
                                                                      "scripted": {"errors": errors_off}})
    assert cfg.passes[-1] == "pairs" and cfg.vlm.scripted.world == str(root)
    rows = annotate_local(records, cfg)
    truth = world_truth(root, [r["image_id"] for r in rows], [r["boxes"] for r in rows])
    checked = 0
    for row, (true, _) in zip(rows, truth):
        asked = [(a["subject"], a["object"]) for a in row["asked_pairs"]]
        assert asked == sample_pairs(row["image_id"], row["boxes"], 4, cfg.seed)
        # every pass's relations: one the pairs pass repeats of an earlier pass is kept once, as first said
        said = close_relations((r["subject"], r["object"], SURFACE_TO_CONCEPT[r["predicate"]])
                               for r in row["relations"] if r["predicate"] in SURFACE_TO_CONCEPT)
        for a, b in asked:
            on_pair = {t for t in true if {t[0], t[1]} == {a, b}}
            assert {t for t in said if {t[0], t[1]} == {a, b}} == on_pair, (row["image_id"], a, b)
            checked += len(on_pair)
    assert checked > 50


def test_the_gate_holds_the_pass_to_each_relations_own_rules():
    boxes = [[0, 0, 10, 10], [60, 0, 70, 10], [10, 0, 20, 10]]  # 1 far from 0; 2 meets 0
    bt = BoxTable.from_images(["img"], [[dict(x1=a, y1=b, x2=c, y2=d, is_person=False, is_body_part=False)
                                         for a, b, c, d in boxes]])
    c = Candidates.from_lists([0] * 4, [0, 0, 0, 0], [1, 1, 2, 1], ["near", "holding", "near", "brighter than"],
                              ["pairs"] * 4)
    rules = gate_relations(bt, c).rule_names().tolist()
    # near far apart: the spatial pass's proximity rule; holding on disjoint boxes: the semantic rule;
    # a non-layout predicate is not refused as "not layout" as it would be in the spatial pass
    assert rules == ["proximity_far", "semantic_disjoint", None, None]
