"""The triplet-probe job, the PoporoIN builder and the extractor actor on a local Ray instance."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from actors.feature_extractor import FeatureExtractorActor
from eval_jobs.triplet_probe import TripletProbeConfig, main
from pipelines.poporo_in import PoporoINConfig, build_poporo_in, write_poporo_in
from relate.config import load_config
from relate.data.poporo import read_triplet_manifest
from relate.probe import cosine_correct
from relate.zoo import create_extractor, load_image

DEMO = Path(__file__).resolve().parents[2] / "eval_jobs" / "configs" / "triplet_probe_synthetic.yaml"


def _cfg(tmp_path) -> TripletProbeConfig:
    return load_config(TripletProbeConfig, DEMO, [
        f"output_dir={tmp_path / 'run'}", "synthetic.n_triplets=16", "synthetic.image_size=32",
        "bootstrap.n_boot=200", "paired.n_permutations=200"])


@pytest.mark.slow  # two full job runs (the second proves the cache); ~15-25 s on 2 idle cores
def test_probe_job_scores_caches_and_reports(ray_session, tmp_path):
    cfg = _cfg(tmp_path)
    cfg.models[1].imagenet_top1 = 50.0  # any value: the scatter needs one to draw a point
    cfg.models[2].imagenet_top1 = 70.0
    res = main(cfg)
    out = Path(cfg.output_dir)
    assert {"results.json", "table.md", "scatter.png", "config.yaml"} <= {p.name for p in out.iterdir()}
    assert list(res.models) == ["pixels", "color_hist", "test_vit"] and res.n_triplets == 16
    # The job's numbers equal a direct, Ray-free computation with the same extractor.
    ts = read_triplet_manifest(res.paths["manifest"])
    ex = create_extractor("color_hist")
    f = {r: ex.encode([load_image(p) for p in v]) for r, v in ts.role_inputs("image").items()}
    direct = cosine_correct(f["query"], f["target"], f["distractor"])
    assert res.models["color_hist"]["correct"] == direct.tolist()
    m = res.models["test_vit"]
    assert sorted(m["layer_sweep"]) == ["block0", "block1"] and m["n_extracted"] == m["n_inputs"] > 0
    lo, hi = m["ci"]["overall"]
    assert lo <= m["scores"]["overall"] <= hi
    assert len(res.paired) == 3 and {"p_mcnemar", "p_permutation"} <= set(res.paired[0])
    saved = json.loads((out / "results.json").read_text())
    assert saved["models"]["pixels"]["scores"] == res.models["pixels"]["scores"]
    assert "| test_vit | supervised |" in (out / "table.md").read_text()
    # Second run: every feature comes from the Parquet cache, results unchanged.
    again = main(cfg)
    assert all(v["n_extracted"] == 0 for v in again.models.values())
    assert again.models["test_vit"]["correct"] == m["correct"]


def _fake_imagenet(root: Path) -> dict[str, str]:
    rng = np.random.default_rng(0)
    classes = ["n001", "n002", "n003", "n004", "n005", "n006"]
    for c in classes:
        (root / c).mkdir(parents=True)
        for i in range(4):
            Image.fromarray(rng.integers(0, 256, (12, 12, 3), dtype=np.uint8)).save(root / c / f"ILSVRC_{c}_{i}.JPEG")
    lists = {"CR": "n001,n002\nn003,n004\n", "TR": "n001,n005\nn003,n006\n",
             "CD": "n001,n003\nn003,n005\n", "SD": "n001,n004\nn003,n002\n"}
    for cell, text in lists.items():
        (root.parent / f"{cell}.txt").write_text(text)
    (root.parent / "names.txt").write_text("".join(f"{c} class {c}, alias\n" for c in classes))
    return {cell: str(root.parent / f"{cell}.txt") for cell in lists}


def test_poporo_in_builder_is_deterministic_across_partitioning(ray_session, tmp_path):
    pairs = _fake_imagenet(tmp_path / "val")
    base = dict(image_root=str(tmp_path / "val"), pairs=pairs, n_triplets=24, seed=5,
                class_names=str(tmp_path / "names.txt"), num_cpus=0.5)
    a = write_poporo_in(PoporoINConfig(**base, output=str(tmp_path / "a.csv"), batch_size=5))
    b = write_poporo_in(PoporoINConfig(**base, output=str(tmp_path / "b.parquet"), batch_size=64, concurrency=2))
    ta, tb = read_triplet_manifest(a), read_triplet_manifest(b)
    assert ta.query == tb.query and ta.distractor == tb.distractor and ta.triplet_id == tb.triplet_id
    assert sorted(np.unique(ta.relation_type, return_counts=True)[1]) == [12, 12]
    assert ta.labels["query"][0].startswith("class n00")
    for q, t in zip(ta.query, ta.target):
        assert Path(q).parent.name != Path(t).parent.name
    ds = build_poporo_in(PoporoINConfig(**base))
    assert isinstance(ds, ray_session.data.Dataset)  # returned unexecuted
    with pytest.raises(FileNotFoundError, match="n009"):
        (tmp_path / "SD.txt").write_text("n001,n009\n")
        build_poporo_in(PoporoINConfig(**base))


def test_extractor_actor_in_map_batches(ray_session, tmp_path):
    paths = []
    for i in range(5):
        p = tmp_path / f"{i}.png"
        Image.new("RGB", (16, 16), (40 * i, 10, 200 - 30 * i)).save(p)
        paths.append({"path": str(p)})
    ds = ray_session.data.from_items(paths).map_batches(
        FeatureExtractorActor, fn_constructor_args=({"name": "color_hist"},), batch_size=2,
        num_cpus=0.5, concurrency=1, batch_format="numpy")
    rows = sorted(ds.take_all(), key=lambda r: r["path"])
    direct = FeatureExtractorActor({"name": "color_hist"})({"path": np.array([r["path"] for r in paths])})
    np.testing.assert_allclose(np.stack([r["feature"] for r in rows]), direct["feature"])
