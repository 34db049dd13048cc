"""The training job's predicate space: P(q|p) estimated and cached by checksum (Eq. 3), the
per-source scope table (App. B.1), and the source index the decode stage hands the loss."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from train_jobs.cooccurrence import load_cooccurrence
from train_jobs.relation_data import DataConfig, DecodeStage, _p_cond, _scope_table, relations_checksum

STRINGS = ["on", "touching", "near", "holding"]


def _rel(s, o, p):
    return {"subject": s, "object": o, "predicate": p}


def _train(extra: int = 0) -> pa.Table:
    # "on" and "touching" stated together on four pairs, "on" alone on two, "near" + "holding" once
    rels = [[_rel(0, 1, "on"), _rel(0, 1, "touching")] for _ in range(4)]
    rels += [[_rel(0, 1, "on")], [_rel(1, 0, "on")], [_rel(0, 1, "near"), _rel(0, 1, "holding")]]
    rels += [[_rel(0, 1, "near")] for _ in range(extra)]
    return pa.table({"image_id": [f"img{i}" for i in range(len(rels))], "relations": rels,
                     "source": ["a"] * 4 + ["b"] * (len(rels) - 4)})


def test_estimate_is_cached_by_checksum_and_matches_the_file(tmp_path, capsys):
    cfg = DataConfig(cache_dir=str(tmp_path), cooccurrence="estimate")
    p = _p_cond(cfg, _train(), STRINGS, np.eye(4))
    files = sorted(tmp_path.glob("cooccurrence-*.npz"))
    assert len(files) == 1 and "multiply-annotated" in capsys.readouterr().out
    strings, mat = load_cooccurrence(files[0])
    assert strings == STRINGS and np.allclose(p, mat.toarray())
    # on <-> touching are co-stated often, on never with holding (a text-neighbour cell, small)
    assert min(p[0, 1], p[1, 0]) > 0.5 > 0.1 > p[0, 3]
    mtime = files[0].stat().st_mtime_ns
    again = _p_cond(cfg, _train(), STRINGS, np.eye(4))  # same relations: the cache answers
    assert "cached estimate" in capsys.readouterr().out and np.array_equal(again, p)
    assert files[0].stat().st_mtime_ns == mtime
    _p_cond(cfg, _train(extra=1), STRINGS, np.eye(4))  # other relations: another estimate, another file
    assert len(list(tmp_path.glob("cooccurrence-*.npz"))) == 2
    assert not list(tmp_path.glob(".*"))  # no temporary file left behind


def test_off_and_explicit_path(tmp_path):
    assert not _p_cond(DataConfig(cooccurrence="off", cache_dir=str(tmp_path)), _train(), STRINGS, np.eye(4)).any()
    assert not list(tmp_path.iterdir())
    est = _p_cond(DataConfig(cache_dir=str(tmp_path)), _train(), STRINGS, np.eye(4))
    path = next(tmp_path.glob("cooccurrence-*.npz"))
    # a file over other strings is mapped by string, not by position
    got = _p_cond(DataConfig(cooccurrence=str(path)), _train(), ["holding", "near", "touching", "on"], np.eye(4))
    assert np.allclose(got, est[::-1, ::-1])
    with pytest.raises(FileNotFoundError, match="missing.npz"):
        _p_cond(DataConfig(cooccurrence=str(tmp_path / "missing.npz")), _train(), STRINGS, np.eye(4))


def test_a_world_that_states_its_full_truth_gets_no_discount(tmp_path, capsys):
    """Eq. 3 spares negatives that may be unstated positives; on a complete corpus there are none. The
    same relations estimate a discount in a plain folder and in a world folder stating only some of its
    truth, and none in a world folder whose synthetic_config.yaml says coverage: full."""
    from relate.config import dump_config
    from relate.data.synthetic import SyntheticConfig

    for coverage in ("stated", "full"):
        root = tmp_path / coverage
        root.mkdir()
        dump_config(SyntheticConfig(coverage=coverage), root / "synthetic_config.yaml")
        p = _p_cond(DataConfig(corpus_root=str(root), cache_dir=str(tmp_path / "cache")), _train(), STRINGS, np.eye(4))
        out = capsys.readouterr().out
        if coverage == "full":
            assert not p.any() and "every relation that holds" in out
        else:
            assert p[0, 1] > 0.5
    plain = _p_cond(DataConfig(corpus_root=str(tmp_path / "nowhere"), cache_dir=str(tmp_path / "cache")), _train(),
                    STRINGS, np.eye(4))
    assert plain[0, 1] > 0.5


def test_checksum_ignores_chunking_and_sees_any_relation_change():
    t = _train()
    assert relations_checksum(t) == relations_checksum(pa.concat_tables([t.slice(0, 3), t.slice(3)]))
    rels = t.column("relations").to_pylist()
    rels[0][0]["predicate"] = "near"
    assert relations_checksum(t.set_column(1, "relations", pa.array(rels))) != relations_checksum(t)


def test_scope_table_by_family_group_string_and_observed():
    from relate.data.lexicon import CONCEPTS

    strings = [f for c in CONCEPTS.values() for f in c.forms]
    keys = [c.name for c in CONCEPTS.values() for _ in c.forms]
    fam = {c.name: c.family for c in CONCEPTS.values()}
    rels = [[_rel(0, 1, "above"), _rel(1, 0, "below")], [_rel(0, 1, "holding")]]
    train = pa.table({"image_id": ["x", "y"], "relations": rels, "source": ["spatial_src", "hoi"]})
    cfg = DataConfig(source_scopes={"hoi": ["action", "part"], "spatial_src": "observed", "mixed": ["left_of", "near"]})
    names, scope = _scope_table(cfg, train, strings, keys)
    assert names == ["*", "hoi", "mixed", "spatial_src"] and scope[0].all()
    assert [k for k, ok in zip(keys, scope[1]) if ok] == [k for k in keys if fam[k] in ("action", "part")]
    assert {k for k, ok in zip(keys, scope[3]) if ok} == {"above", "below"}  # whole groups, every surface form
    mixed = {k for k, ok in zip(keys, scope[2]) if ok}
    assert "left_of" in mixed and "near" in mixed and len(mixed) == 2  # a group key, and a string's group
    with pytest.raises(ValueError, match=r"source_scopes.hoi: 'flying'"):
        _scope_table(DataConfig(source_scopes={"hoi": ["flying"]}), train, strings, keys)
    with pytest.raises(ValueError, match=r"source_scopes.vg: 'observed', but no training relation has source 'vg'"):
        _scope_table(DataConfig(source_scopes={"vg": "observed"}), train, strings, keys)


def test_decode_stage_hands_each_image_its_scope_row(tmp_path):
    from PIL import Image

    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(tmp_path / "a.png")
    row = {"uri": str(tmp_path / "a.png"), "width": 8, "height": 8, "boxes": [], "relations": []}
    batch = pa.Table.from_pylist([{**row, "source": s} for s in ("hoi", "other", "spatial_src")])
    stage = DecodeStage(16, DataConfig(photometric=0.0), ["on"], ["cup"], sources=["*", "hoi", "spatial_src"])
    assert stage(batch)["source"].tolist() == [1, 0, 2]


def test_dropped_by_caps_counts_what_decoding_would_cut():
    """A box beyond max_boxes takes its relations with it; each image keeps max_relations; self-loops
    are no training relations either way (DecodeStage drops them) and are not counted as cut."""
    import pyarrow as pa

    from train_jobs.relation_data import DataConfig, dropped_by_caps

    def rel(s, o):
        return {"subject": s, "object": o, "predicate": "near"}

    table = pa.table({"relations": [[rel(0, 1), rel(1, 2), rel(2, 0), rel(0, 3)],  # box 3 beyond max_boxes=3
                                    [rel(0, 1), rel(1, 0), rel(0, 2), rel(2, 1), rel(1, 1)],  # 4 valid, cap 3
                                    [rel(0, 1)]]})
    assert dropped_by_caps(table, DataConfig(max_boxes=3, max_relations=3)) == (2, 10, 2)
    assert dropped_by_caps(table, DataConfig(max_boxes=4, max_relations=4)) == (0, 10, 0)


def test_decode_states_what_each_relation_implies_in_the_training_vocabulary(tmp_path):
    """``data.implied_relations``: "cup on table" also trains "cup touching table" and "table touching
    cup"; "2 in front of 0" trains "0 behind 2" with the string paired with its own; a group outside
    the forms (an OvR-SGG hold-out of "behind") is never stated; stated relations come first."""
    from PIL import Image

    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(tmp_path / "a.png")
    boxes = [{"x1": 0.0, "y1": 0.0, "x2": 4.0, "y2": 4.0, "category": "cup"}] * 3
    rels = [_rel(0, 1, "on"), _rel(2, 0, "occluding")]
    row = {"uri": str(tmp_path / "a.png"), "width": 8, "height": 8, "boxes": boxes, "relations": rels, "source": "x"}
    forms = ["on", "touching", "against", "in front of", "occluding", "behind", "hidden behind"]
    idx = {f: i for i, f in enumerate(forms)}

    def decoded(data, forms):
        got = DecodeStage(16, data, forms, ["cup"])(pa.Table.from_pylist([row]))["rels"][0]
        return [tuple(r) for r in got.tolist() if r[0] >= 0]

    plain = decoded(DataConfig(photometric=0.0), forms)
    assert plain == [(0, 1, idx["on"]), (2, 0, idx["occluding"])]
    implied = decoded(DataConfig(photometric=0.0, implied_relations=True), forms)
    assert implied[:2] == plain
    assert sorted(implied[2:]) == sorted([(0, 1, idx["touching"]), (1, 0, idx["touching"]), (0, 2, idx["hidden behind"])])
    held = [f for f in forms if f not in ("behind", "hidden behind")]
    without = decoded(DataConfig(photometric=0.0, implied_relations=True), held)
    hidx = {f: i for i, f in enumerate(held)}
    assert sorted(without[2:]) == sorted([(0, 1, hidx["touching"]), (1, 0, hidx["touching"])])


def test_family_scope_is_one_family_on_a_world_that_states_its_full_truth(tmp_path):
    from relate.config import dump_config
    from relate.data.synthetic import SyntheticConfig
    from train_jobs.relation_data import family_ids

    keys = ["left_of", "right_of", "near", "touching", "on", "no such group", "also unknown"]
    ids = {}
    for coverage in ("stated", "full"):
        root = tmp_path / coverage
        root.mkdir()
        dump_config(SyntheticConfig(coverage=coverage), root / "synthetic_config.yaml")
        ids[coverage] = family_ids(DataConfig(corpus_root=str(root)), keys).tolist()
    s = ids["stated"]
    assert s[0] == s[1] and s[3] == s[4] and s[5] == s[6] and len({s[0], s[2], s[3], s[5]}) == 4
    assert ids["full"] == [0] * len(keys)


def test_p_cond_is_counted_on_the_pairs_a_pass_was_asked_about():
    """Image 1 states "left of" on (0, 1) in the spatial pass; the pairs pass, asked about {0, 1}, adds
    "near". Image 2 says the same of its (0, 1) but the asked pair holds nothing more. Image 3's asked
    pair {1, 2} has no relation at all. Counted per ordered pair, with what each statement implies:
    P(near | left of) = P(near | right of) = 1/2, P(right of | left of) = 0 (never on the same ordered
    pair), P(near | nothing stated) = 0 over image 3's two ordered pairs; an image with no asked pair
    counts nothing."""
    from train_jobs.cooccurrence import count_on_asked_pairs, has_asked_pairs
    from train_jobs.relation_data import concept_key

    def rel(s, o, p, ps):
        return {"subject": s, "object": o, "predicate": p, "pass": ps}

    rows = [[rel(0, 1, "left of", "spatial"), rel(0, 1, "near", "pairs"), rel(0, 1, "left of", "pairs")],
            [rel(0, 1, "left of", "spatial")], [], [rel(0, 1, "near", "spatial")]]
    asked = [[{"subject": 0, "object": 1}], [{"subject": 0, "object": 1}], [{"subject": 1, "object": 2}], None]
    table = pa.table({"relations": rows, "asked_pairs": asked})
    assert has_asked_pairs(table) and not has_asked_pairs(table.slice(3))
    strings = ["left of", "right of", "near", "next to"]
    p, empty, pairs = count_on_asked_pairs(table, strings, lambda x: concept_key(x, "synthetic_lexicon"), min_count=1)
    i = {s: k for k, s in enumerate(strings)}
    assert pairs == 6
    assert p[i["left of"], i["near"]] == pytest.approx(0.5) and p[i["right of"], i["next to"]] == pytest.approx(0.5)
    assert p[i["left of"], i["right of"]] == 0.0
    assert empty.tolist() == [0.0, 0.0, 0.0, 0.0]
    p5, _, _ = count_on_asked_pairs(table, strings, lambda x: concept_key(x, "synthetic_lexicon"), min_count=5)
    assert not p5.any()  # too few asked pairs stated "left of" to count on


def test_decode_marks_asked_pairs_complete_both_ways(tmp_path):
    from PIL import Image

    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(tmp_path / "a.png")
    boxes = [{"x1": 0.0, "y1": 0.0, "x2": 4.0, "y2": 4.0, "category": "cup"}] * 3
    row = {"uri": str(tmp_path / "a.png"), "width": 8, "height": 8, "boxes": boxes, "relations": [], "source": "x",
           "asked_pairs": [{"subject": 0, "object": 2}]}
    got = DecodeStage(16, DataConfig(photometric=0.0, max_boxes=3), ["on"], ["cup"])(pa.Table.from_pylist([row]))
    assert sorted(np.flatnonzero(got["complete"][0]).tolist()) == [0 * 3 + 2, 2 * 3 + 0]


def test_unlabelled_families_mark_their_groups_except_on_a_full_truth_world(tmp_path):
    from relate.config import dump_config
    from relate.data.synthetic import SyntheticConfig
    from train_jobs.relation_data import _unlabelled

    keys = ["brighter_than", "darker_than", "same_colour_as", "left_of", "near", "no such group"]
    got = {}
    for coverage in ("stated", "full"):
        root = tmp_path / coverage
        root.mkdir()
        dump_config(SyntheticConfig(coverage=coverage), root / "synthetic_config.yaml")
        got[coverage] = _unlabelled(DataConfig(corpus_root=str(root), unlabelled_families=["appearance"]), keys)
    assert got["stated"].tolist() == [True, True, True, False, False, False]
    assert got["full"] is None  # every unstated cell of a full-truth corpus is a true negative
    assert _unlabelled(DataConfig(corpus_root=str(tmp_path / "stated")), keys) is None
    with pytest.raises(ValueError, match="colour.*not families"):  # refused with the config, before any work
        DataConfig(corpus_root=str(tmp_path / "stated"), unlabelled_families=["colour"])
