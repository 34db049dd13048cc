"""eval_jobs.ovsgg pieces without Ray: config validation, per-cell scoring (A3 with the packaged
MiniLM space, HICO-DET cells for A2), axis chance correction and the report writers."""

from __future__ import annotations

import numpy as np
import pytest

from eval_jobs.ovsgg import BenchmarkSpec, InferenceSpec, OVSGGConfig, SystemSpec
from eval_jobs.ovsgg_cells import axis_scores, load_benchmark, score_cell
from eval_jobs.report import write_radar, write_table
from relate.config import ConfigError, load_config
from relate.data.export import synthesize_negatives, write_hico_det, write_psg
from relate.metrics import recall_chance
from relate.schema import CORPUS_SCHEMA, PREDICTIONS_SCHEMA, to_table
from relate.text.vocabulary import build_vocabulary


def _box(x, cat):
    return {"x1": x, "y1": 0.0, "x2": x + 8.0, "y2": 8.0, "category": cat, "is_person": False, "is_body_part": False}


def _corpus():
    rows = []
    for i in range(4):
        rows.append({"image_id": f"c{i}", "uri": "u", "width": 64, "height": 16, "source": "t", "split": "test",
                     "boxes": [_box(0, "cup"), _box(20, "table"), _box(40, "person")],
                     "relations": [{"subject": 0, "object": 1, "predicate": "on top of", "pass": "human", "gate": "kept",
                                    "score": None},
                                   {"subject": 2, "object": 1, "predicate": "next to", "pass": "human", "gate": "kept",
                                    "score": None}]})
    return to_table(rows, CORPUS_SCHEMA)


def test_config_validation_names_the_problem(tmp_path):
    with pytest.raises(ValueError, match="A4 needs 'detections'"):
        BenchmarkSpec(name="d", axis="A4", reader="psg", path="x")
    with pytest.raises(ValueError, match="unknown benchmark"):
        OVSGGConfig(benchmarks=[BenchmarkSpec(name="psg", axis="A1", reader="psg", path="x")],
                    systems=[SystemSpec(name="s", predictions={"vg": "p.parquet"})])
    with pytest.raises(ValueError, match="headline_k"):
        OVSGGConfig(ks=[20, 100], headline_k=50)
    bad = BenchmarkSpec(name="p", axis="A1", reader="psg", path=str(tmp_path), reader_options={"h5_name": "x.h5"})
    with pytest.raises(ValueError, match="rejected options"):
        load_benchmark(bad)
    (tmp_path / "c.yaml").write_text("benchmarks: []\nnot_a_field: 1\n")
    with pytest.raises(ConfigError, match="not_a_field"):
        load_config(OVSGGConfig, tmp_path / "c.yaml")
    for name in ("ovsgg.yaml", "ovsgg_synthetic.yaml"):
        cfg = load_config(OVSGGConfig, f"eval_jobs/configs/{name}")
        assert cfg.graph_constrained and cfg.matcher == "one_to_one"
    # inference.checkpoint may name a pointer file (a training run's LATEST): its line is the checkpoint
    (tmp_path / "LATEST").write_text("/ckpts/run/checkpoint_0004\n")
    inf = InferenceSpec(system="s", checkpoint=str(tmp_path / "LATEST"))
    assert inf.resolve_checkpoint() == "/ckpts/run/checkpoint_0004"
    assert InferenceSpec(system="s", checkpoint="s3://b/ck").resolve_checkpoint() == "s3://b/ck"
    (tmp_path / "EMPTY").write_text("\n")
    with pytest.raises(ValueError, match="empty pointer file"):
        InferenceSpec(system="s", checkpoint=str(tmp_path / "EMPTY")).resolve_checkpoint()
    # any other file (Ray Train's checkpoint_manager_snapshot.json, a weights file) is named, not read as a path
    (tmp_path / "snapshot.json").write_text('{"checkpoints": [\n  {"path": "/ckpts/run/checkpoint_0004"}\n]}\n')
    (tmp_path / "model.safetensors").write_bytes(b"\x00\x9f\xff" * 100)
    for name in ("snapshot.json", "model.safetensors"):
        with pytest.raises(ValueError, match=f"{name}' is a file but not a pointer file"):
            InferenceSpec(system="s", checkpoint=str(tmp_path / name)).resolve_checkpoint()


@pytest.mark.slow
def test_open_vocab_cell_with_minilm_space(tmp_path):
    write_psg(_corpus(), tmp_path / "psg", segments=False)
    spec = BenchmarkSpec(name="psg", axis="A3", reader="psg", path=str(tmp_path / "psg"))
    bench = load_benchmark(spec)
    # the model answers from its own vocabulary: 'on' and 'near' are synonyms of the annotation
    preds = to_table([{"image_id": f"c{i}", "triplets": [
        {"subject": 0, "object": 1, "predicate": "on", "score": .9, "spatial_score": None, "semantic_score": None},
        {"subject": 0, "object": 1, "predicate": "on top of", "score": .8, "spatial_score": None, "semantic_score": None},
        {"subject": 2, "object": 1, "predicate": "holding", "score": .7, "spatial_score": None, "semantic_score": None}]}
        for i in range(4)], PREDICTIONS_SCHEMA)
    cfg = OVSGGConfig(benchmarks=[spec])
    cell = score_cell(spec, bench, preds, cfg)
    ov = cell["open_vocab"]
    assert ov["mode"] == "graph_constrained"
    assert 0 < ov["threshold"] < 1
    assert ov["metrics"]["R@20"] == pytest.approx(0.5)       # 'on' ~ 'on top of'; 'holding' !~ 'next to'
    assert ov["metrics"]["MRR"] == pytest.approx((1 / 2 + 0) / 2)
    # A3 defaults to the packaged vocabulary: V of chance, MRR and median rank is its size
    V = len(build_vocabulary())
    assert V > 19_000 and cell["vocabulary_size"] == V and ov["vocabulary"]["name"] == "packaged"
    assert ov["vocabulary"]["answered_outside"] == 0 and ov["vocabulary"]["answered_strings"] == 3
    assert ov["metrics"]["median_rank"] == pytest.approx((2 + V) / 2)  # 'on top of' 2nd; 'next to' unranked
    axes = axis_scores([cell], None, 50)
    assert axes["A3"]["norm"] == pytest.approx((ov["metrics"]["mR@50"] - 1 / V) / (1 - 1 / V))
    # a vocabulary file: its size is V, and answers outside it are counted, not dropped
    (tmp_path / "vocab.txt").write_text("on\non top of\nnext to\nbeside\n")
    spec_f = BenchmarkSpec(name="psg", axis="A3", reader="psg", path=str(tmp_path / "psg"),
                           vocabulary=str(tmp_path / "vocab.txt"))
    ov_f = score_cell(spec_f, bench, preds, cfg)["open_vocab"]
    assert ov_f["metrics"]["vocabulary_size"] == 4 and ov_f["metrics"]["median_rank"] == pytest.approx(3.0)
    assert ov_f["vocabulary"]["answered_outside"] == 1 and ov_f["vocabulary"]["examples_outside"] == ["holding"]
    assert ov_f["metrics"]["R@20"] == ov["metrics"]["R@20"]  # matching is by string, whatever V is
    with pytest.raises(ValueError, match="'vocabulary' is for axis A3"):
        BenchmarkSpec(name="psg", axis="A1", reader="psg", path="x", vocabulary="packaged")


def test_hico_det_cells_feed_a2(tmp_path):
    corpus = _corpus()
    write_hico_det(corpus, tmp_path / "hico", cells=synthesize_negatives(corpus, seed=0))
    spec = BenchmarkSpec(name="hico", axis="A2", reader="hico_det", path=str(tmp_path / "hico"), min_support=1)
    bench = load_benchmark(spec)
    assert bench.cells is not None
    preds = to_table([{"image_id": f"c{i}", "triplets": [
        {"subject": 0, "object": 1, "predicate": "on top of", "score": .9, "spatial_score": None, "semantic_score": None}]}
        for i in range(4)], PREDICTIONS_SCHEMA)
    cell = score_cell(spec, bench, preds, OVSGGConfig(benchmarks=[spec]))
    f = cell["federated"]
    assert f["per_predicate_ap"]["on top of"] == pytest.approx(1.0)
    assert 0 < f["prevalence"] < 1 and f["pair_coverage"] < 1


def test_axis_scores_and_report(tmp_path):
    cells = [{"axis": "A1", "benchmark": "a", "vocabulary_size": 50,
              "recall": {"metrics": {"F1@50": 0.369, "mR@50": 0.282}}},
             {"axis": "A6", "benchmark": "s", "spatial": {"macro_auc": 0.69, "pooled_auc": 0.675}}]
    axes = axis_scores(cells, 0.67, 50)
    assert axes["A1"]["norm"] == pytest.approx((0.369 - recall_chance(50)) / (1 - 0.02))
    assert axes["A6"]["norm"] == pytest.approx(0.38) and axes["A5"]["norm"] == 0.67
    from relate.metrics import composite, leave_one_axis_out

    comp = composite({a: v["norm"] for a, v in axes.items()}).to_dict()
    result = {"protocol": {"mode": "graph_constrained", "matcher": "one_to_one", "headline_k": 50},
              "systems": {"ours": {"cells": {c["benchmark"]: c for c in cells}, "axes": axes, "composite": comp}},
              "leave_one_axis_out": leave_one_axis_out({"ours": {a: v["norm"] for a, v in axes.items()}})}
    cfg = OVSGGConfig(benchmarks=[BenchmarkSpec(name="a", axis="A1", reader="psg", path="x"),
                                  BenchmarkSpec(name="s", axis="A6", reader="spatialsense", path="y")])
    text = write_table(result, cfg, tmp_path / "t.md")
    assert "| A1 transfer | a, F1@50 (mR@50) | 36.9 (28.2) |" in text
    assert "| A6 spatial | s, macro AUC (pooled AUC) | 69.0 (67.5) | chance 50.0 |" in text
    assert "weakest axis" in text and "balance" in text
    write_radar(result, tmp_path / "r.png")
    assert (tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG"
    assert np.isfinite(comp["ovs"])


def test_per_image_parquet_beside_results(tmp_path):
    import json

    import pyarrow.parquet as pq

    from eval_jobs.ovsgg import main
    from relate.schema import PER_IMAGE_SCHEMA

    write_psg(_corpus(), tmp_path / "psg", segments=False)
    spec = BenchmarkSpec(name="psg", axis="A1", reader="psg", path=str(tmp_path / "psg"))
    # c0, c1 find both relations, c2 only 'on top of', c3 nothing: R@50 = (1 + 1 + .5 + 0) / 4
    tri = [{"subject": 0, "object": 1, "predicate": "on top of", "score": .9, "spatial_score": None,
            "semantic_score": None},
           {"subject": 2, "object": 1, "predicate": "next to", "score": .8, "spatial_score": None,
            "semantic_score": None}]
    pq.write_table(to_table([{"image_id": f"c{i}", "triplets": [tri, tri, tri[:1], []][i]} for i in range(4)],
                            PREDICTIONS_SCHEMA), tmp_path / "p.parquet")
    cfg = OVSGGConfig(out_dir=str(tmp_path / "out"), benchmarks=[spec], use_ray=False,
                      systems=[SystemSpec(name="s", predictions={"psg": str(tmp_path / "p.parquet")})])
    main(cfg)
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    assert saved["per_image"] == "per_image.parquet"
    assert "_per_image" not in saved["systems"]["s"]["cells"]["psg"]
    t = pq.read_table(tmp_path / "out" / saved["per_image"])
    assert t.schema.equals(PER_IMAGE_SCHEMA)
    df = t.to_pandas()
    at50 = df[(df.system == "s") & (df.benchmark == "psg") & (df.k == 50)]
    assert len(at50) == 4 and set(at50.protocol) == {"paper"}
    r50 = saved["systems"]["s"]["cells"]["psg"]["recall"]["metrics"]["R@50"]
    assert at50.recall.mean() == pytest.approx(r50) == pytest.approx(0.625)
    # sgb keeps its per-image state inside its own loop: no rows, and no stale file left behind
    main(cfg.model_copy(update={"protocol": "sgb"}))
    assert json.loads((tmp_path / "out" / "results.json").read_text())["per_image"] is None
    assert not (tmp_path / "out" / "per_image.parquet").exists()
