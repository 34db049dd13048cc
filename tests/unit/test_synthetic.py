from collections import Counter

import numpy as np
import pytest

from relate import geometry as G
from relate.data.lexicon import CONCEPTS, FAMILIES, SURFACE_TO_CONCEPT, concept_of
from relate.data.synthetic import SyntheticConfig, make_scene, split_of
from relate.schema import CORPUS_SCHEMA, to_table, validate_corpus

CFG = SyntheticConfig(seed=3)
SCENES = [make_scene(i, CFG) for i in range(300)]


def _box(scene, i):
    b = scene.boxes[i]
    return np.array([b["x1"], b["y1"], b["x2"], b["y2"]])


def test_deterministic_and_seed_dependent():
    a, b = make_scene(7, CFG), make_scene(7, CFG)
    assert a.image_id == b.image_id and np.array_equal(a.image, b.image)
    assert a.boxes == b.boxes and a.relations == b.relations
    c = make_scene(7, SyntheticConfig(seed=4))
    assert not np.array_equal(a.image, c.image) or a.boxes != c.boxes


def test_sizes_counts_and_schema():
    for s in SCENES:
        assert CFG.min_size <= s.width <= CFG.max_size and CFG.min_size <= s.height <= CFG.max_size
        assert CFG.min_objects <= len(s.boxes) <= CFG.max_objects
        assert s.image.dtype == np.uint8 and s.image.shape == (s.height, s.width, 3)
    rows = [dict(image_id=s.image_id, uri="x", width=s.width, height=s.height, source="synthetic", split="train",
                 boxes=s.boxes, relations=[dict(subject=r["subject"], object=r["object"], predicate=r["predicate"],
                                                gate="kept", score=None, **{"pass": "human"}) for r in s.relations])
            for s in SCENES]
    validate_corpus(to_table(rows, CORPUS_SCHEMA))


def test_every_family_and_synonyms_present():
    fam = Counter(CONCEPTS[r["concept"]].family for s in SCENES for r in s.relations)
    assert set(fam) == set(FAMILIES)
    forms = Counter(r["predicate"] for s in SCENES for r in s.relations)
    for c in ("left_of", "above", "in_front_of", "inside", "holding"):
        assert sum(1 for f in CONCEPTS[c].forms if forms[f]) >= 2, c
    assert any(b["is_body_part"] for s in SCENES for b in s.boxes)


def test_relations_satisfy_their_geometry():
    for s in SCENES:
        for r in s.relations:
            c = CONCEPTS[r["concept"]]
            a, b = _box(s, r["subject"]), _box(s, r["object"])
            assert concept_of(r["predicate"]).name == c.name
            if c.family in ("contact", "action"):
                assert G.touch(a, b, tol=1e-6), (s.image_id, r)
            if c.name == "inside":
                assert G.containment(a, b) >= 0.5
            if c.name == "contains":
                assert G.containment(b, a) >= 0.5
            if c.name in ("left_of", "right_of"):
                dx = G.centres(b)[0] - G.centres(a)[0]
                assert dx > 0 if c.name == "left_of" else dx < 0
            if c.name in ("above", "below"):
                dy = G.centres(b)[1] - G.centres(a)[1]
                assert dy > 0 if c.name == "above" else dy < 0
            if s.boxes[r["subject"]]["is_body_part"]:
                assert c.name == "part_of"
            if c.name == "in_front_of":
                assert s.depth[r["subject"]] > s.depth[r["object"]]
            if c.name == "behind":
                assert s.depth[r["subject"]] < s.depth[r["object"]]
        pairs = [(r["subject"], r["object"]) for r in s.relations]
        assert len(pairs) == len(set(pairs)) and all(i != j for i, j in pairs)


def test_depth_is_not_decidable_from_boxes():
    """Occlusion order is random: the front object is not predictably the larger or lower one."""
    bigger_in_front, lower_in_front, n = 0, 0, 0
    for s in SCENES:
        for r in s.relations:
            if r["concept"] not in ("in_front_of", "behind"):
                continue
            f, k = (r["subject"], r["object"]) if r["concept"] == "in_front_of" else (r["object"], r["subject"])
            bigger_in_front += G.area(_box(s, f)) > G.area(_box(s, k))
            lower_in_front += _box(s, f)[3] > _box(s, k)[3]
            n += 1
    assert n > 50
    assert abs(bigger_in_front / n - 0.5) < 0.15 and abs(lower_in_front / n - 0.5) < 0.15


def test_directions_are_balanced():
    c = Counter(r["concept"] for s in SCENES for r in s.relations)
    for a, b in (("left_of", "right_of"), ("above", "below"), ("in_front_of", "behind")):
        assert abs(c[a] - c[b]) / (c[a] + c[b]) < 0.2


def test_split_is_stable_and_proportional():
    ids = [f"synth-0-{i:07d}" for i in range(5000)]
    splits = Counter(split_of(i, (0.8, 0.1, 0.1)) for i in ids)
    assert abs(splits["train"] / 5000 - 0.8) < 0.03
    assert split_of(ids[0], (0.8, 0.1, 0.1)) == split_of(ids[0], (0.8, 0.1, 0.1))


def test_config_rejects_inconsistent_values():
    with pytest.raises(ValueError, match="min_size"):
        SyntheticConfig(min_size=200, max_size=100)
    with pytest.raises(ValueError, match="split_fractions"):
        SyntheticConfig(split_fractions=(0.5, 0.2, 0.2))
    with pytest.raises(ValueError, match="extra"):
        SyntheticConfig(colour_mode="x")


def test_lexicon_is_consistent():
    assert len(SURFACE_TO_CONCEPT) == sum(len(c.forms) for c in CONCEPTS.values())
    with pytest.raises(KeyError, match="not a synthetic-world predicate"):
        concept_of("levitating over")
