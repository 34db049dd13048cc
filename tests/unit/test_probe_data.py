"""Triplet manifests, the synthetic triplet set, PoporoIN planning, the feature cache, reports."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from relate.data.poporo import (
    pick_images, plan_class_triplets, read_pair_list, read_triplet_manifest, write_triplet_manifest,
)
from relate.data.synthetic_triplets import SyntheticTripletsConfig, write_synthetic_triplets
from relate.probe import ModelRow, bootstrap_intervals, format_markdown_table, plot_scatter, score_triplets
from relate.probe.cache import FeatureCache, cached_features, model_fingerprint


def _digest(folder) -> str:
    h = hashlib.sha1()
    for f in sorted(folder.rglob("*.png")):
        h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()


def test_synthetic_set_is_deterministic_balanced_and_readable(tmp_path):
    cfg = SyntheticTripletsConfig(n_triplets=16, image_size=32, seed=3)
    m1 = write_synthetic_triplets(tmp_path / "a", cfg)
    m2 = write_synthetic_triplets(tmp_path / "b", cfg)
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")
    write_synthetic_triplets(tmp_path / "c", cfg.model_copy(update={"seed": 4}))
    assert _digest(tmp_path / "c") != _digest(tmp_path / "a")
    ts = read_triplet_manifest(m1)
    assert len(ts) == 16 and m2.name == "manifest.csv"
    assert sorted(np.unique(ts.relation_type, return_counts=True)[1]) == [8, 8]
    assert sorted(np.unique(ts.distractor_type, return_counts=True)[1]) == [8, 8]
    # The design: CD distractors share the query's colour word, SD ones its shape word.
    for i in range(16):
        q, d = ts.labels["query"][i].split(), ts.labels["distractor"][i].split()
        same = (q[0] == d[0]) if ts.distractor_type[i] == "CD" else (q[2] == d[2])
        assert same and q[1] != d[1]


def test_histogram_baseline_fails_colour_matched_distractors(tmp_path):
    """The synthetic set's known structure: colour alone picks the colour-matched distractor."""
    from relate.zoo import create_extractor, load_image
    from relate.probe import cosine_correct

    ts = read_triplet_manifest(write_synthetic_triplets(tmp_path, SyntheticTripletsConfig(n_triplets=40, image_size=48)))
    ex = create_extractor("color_hist")
    f = {r: ex.encode([load_image(p) for p in v]) for r, v in ts.role_inputs("image").items()}
    s = score_triplets(cosine_correct(f["query"], f["target"], f["distractor"]), ts.relation_type, ts.distractor_type)
    assert s.CD < 0.2 and s.SD > s.CD + 0.2 and s.gap_cd_sd < 0


def test_manifest_roundtrip_and_errors(tmp_path):
    (tmp_path / "img").mkdir()
    for n in ("q", "t", "d"):
        (tmp_path / "img" / f"{n}.png").write_bytes(b"x")
    row = {"triplet_id": "a", "query": "img/q.png", "target": "img/t.png", "distractor": "img/d.png",
           "relation_type": "CR", "distractor_type": "SD"}
    for suffix in ("csv", "parquet"):
        p = write_triplet_manifest([row, dict(row, triplet_id="b", relation_type="TR")], tmp_path / f"m.{suffix}")
        ts = read_triplet_manifest(p)
        assert ts.triplet_id == ["a", "b"] and ts.relation_type.tolist() == ["CR", "TR"]
        assert ts.query[0] == str((tmp_path / "img" / "q.png").resolve()) and ts.labels is None
        with pytest.raises(ValueError, match="no class labels"):
            ts.role_inputs("label")
    bad = write_triplet_manifest([dict(row, relation_type="XR")], tmp_path / "bad.csv")
    with pytest.raises(ValueError, match=r"bad.csv: relation_type: unknown labels \['XR'\]"):
        read_triplet_manifest(bad)
    (tmp_path / "cols.csv").write_text("query,target\na,b\n")
    with pytest.raises(ValueError, match=r"missing columns \['distractor'"):
        read_triplet_manifest(tmp_path / "cols.csv")
    gone = write_triplet_manifest([dict(row, target="img/nope.png")], tmp_path / "gone.csv")
    with pytest.raises(FileNotFoundError, match="nope.png"):
        read_triplet_manifest(gone)
    dup = write_triplet_manifest([row, row], tmp_path / "dup.csv")
    with pytest.raises(ValueError, match="not unique"):
        read_triplet_manifest(dup)


def _pairs():
    return {"CR": [("mic", "speaker"), ("rifle", "revolver")],
            "TR": [("mic", "stage"), ("rifle", "helmet"), ("corkscrew", "wine")],
            "CD": [("mic", "crow"), ("rifle", "tyre")], "SD": [("mic", "icecream"), ("rifle", "pipe")]}


def test_poporo_in_plan_is_balanced_deterministic_and_valid(tmp_path):
    plan = plan_class_triplets(_pairs(), 40, seed=1)
    assert plan == plan_class_triplets(_pairs(), 40, seed=1)
    assert plan != plan_class_triplets(_pairs(), 40, seed=2)
    cells = [(r["relation_type"], r["distractor_type"]) for r in plan]
    assert all(cells.count(c) == 10 for c in {("CR", "CD"), ("CR", "SD"), ("TR", "CD"), ("TR", "SD")})
    pairs = _pairs()
    for r in plan:
        rel = {frozenset(p) for p in pairs[r["relation_type"]]}
        dis = {frozenset(p) for p in pairs[r["distractor_type"]]}
        assert frozenset((r["query_class"], r["target_class"])) in rel
        assert frozenset((r["query_class"], r["distractor_class"])) in dis
    with pytest.raises(ValueError, match=r"cells \['SD'\]"):
        plan_class_triplets({**pairs, "SD": []}, 8, 0)
    with pytest.raises(ValueError, match="multiple of 4"):
        plan_class_triplets(pairs, 10, 0)
    f = tmp_path / "cr.txt"
    f.write_text("# taxonomic\nmic, speaker\nrifle\trevolver\n\n")
    assert read_pair_list(f) == [("mic", "speaker"), ("rifle", "revolver")]
    f.write_text("mic,mic\n")
    with pytest.raises(ValueError, match="cr.txt:1"):
        read_pair_list(f)
    images = {c: [f"{c}/{i}.jpg" for i in range(5)] for c in ("mic", "speaker", "crow")}
    row = {"triplet_id": "CRCD-00001", "query_class": "mic", "target_class": "speaker", "distractor_class": "crow"}
    assert pick_images(row, images, 0) == pick_images(dict(row), images, 0)


def test_feature_cache_computes_only_missing_inputs(tmp_path):
    fp = model_fingerprint("a/b", pretrained=False, seed=0)
    assert fp.startswith("a_b--") and fp != model_fingerprint("a/b", pretrained=True, seed=0)
    calls = []

    def compute(idx):
        calls.append(list(idx))
        return {"final": np.array([[float(i), 1.0] for i in idx]), "block0": np.ones((len(idx), 3))}

    feats, n = cached_features(FeatureCache(tmp_path, fp), ["k0", "k1"], ["final", "block0"], compute)
    assert n == 2 and feats["final"].shape == (2, 2)
    feats, n = cached_features(FeatureCache(tmp_path, fp), ["k1", "k2", "k0"], ["final", "block0"], compute)
    assert n == 1 and calls[-1] == [1]  # only k2 (index 1 of the second call) was computed
    np.testing.assert_array_equal(feats["final"][:, 0], [1.0, 1.0, 0.0])
    assert len(FeatureCache(tmp_path, fp)) == 6


def test_markdown_table_and_scatter(tmp_path):
    rel = np.array(["CR", "TR"] * 10)
    dis = np.array(["CD"] * 10 + ["SD"] * 10)
    c = np.arange(20) % 3 != 0
    s = score_triplets(c, rel, dis)
    rows = [ModelRow("clip_x", "clip", 86.2, 80.1, s, bootstrap_intervals(c, rel, dis, n_boot=100)),
            ModelRow("pixels", "baseline", None, None, s)]
    md = format_markdown_table(rows, "POPORO")
    lines = md.splitlines()
    assert "Δ CR-TR" in lines[2] and lines[4].startswith("| clip_x | clip | 86.2 | 80.10 | 65.00 |")
    assert "20 triplets (CR 10, TR 10; CD 10, SD 10)" in md
    png = plot_scatter(rows, tmp_path / "fig.png")
    assert png is not None and png.read_bytes()[:4] == b"\x89PNG"
    assert plot_scatter(rows[1:], tmp_path / "none.png") is None
