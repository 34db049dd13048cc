"""Each analysis command end to end on a small synthetic case: its files, and the answers the case fixes."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from eval_jobs.analysis_inputs import ScenesConfig
from eval_jobs.attribution import AttributionConfig, main as attribution
from eval_jobs.label_dependence import LabelDependenceConfig, main as label_dependence
from eval_jobs.representation import RepresentationConfig, main as representation

SCENES = ScenesConfig(images=6, batch_size=3)


def test_label_dependence_job_on_the_synthetic_case(tmp_path):
    r = label_dependence(LabelDependenceConfig(scenes=SCENES, train_images=40, out_dir=str(tmp_path)))
    rows = {row["system"]: row for row in pq.read_table(tmp_path / "label_dependence.parquet").to_pylist()}
    lookup = rows["label_lookup"]
    assert lookup["self_lookup_covered"] == 1.0 and lookup["cond_entropy"] == pytest.approx(0.0, abs=1e-12)
    # label pairs the 40 training scenes never showed get the overall majority, which need not agree
    assert lookup["freq_agreement"] > rows["world_truth"]["freq_agreement"]
    assert rows["world_truth"]["cond_entropy"] > 0
    inter = {(x["system"], x["labels"]): x for x in r.intervention}
    model = next(s for s in rows if s.startswith("model"))
    assert inter[(model, "true")]["self_lookup"] == inter[(model, "shuffled")]["self_lookup"]  # reads no labels
    assert inter[("label_lookup", "constant")]["distinct_predicates"] == 1
    for f in ("label_dependence.md", "label_dependence.png", "intervention.parquet", "config.yaml",
              "predictions/label_lookup.parquet"):
        assert (tmp_path / f).is_file(), f


def test_attribution_and_representation_jobs(tmp_path):
    a = attribution(AttributionConfig(scenes=SCENES, out_dir=str(tmp_path / "a")))
    assert a.max_residual < 2e-5
    assert [r["channel_removed"] for r in a.lesions][1:] == ["object_features", "geometry", "pixels", "all_inputs"]
    assert pq.read_table(tmp_path / "a" / "decomposition.parquet").num_rows == 10
    assert (tmp_path / "a" / "attribution.png").stat().st_size > 1000
    with pytest.raises(ValueError, match="unknown lesion"):
        attribution(AttributionConfig(scenes=SCENES, lesions=["ears"], out_dir=str(tmp_path / "bad")))
    r = representation(RepresentationConfig(scenes=SCENES, out_dir=str(tmp_path / "r")))
    assert all(0 < row["linear_cka"] < 1 for row in r.cka)  # two different random seeds
    same = representation(RepresentationConfig(scenes=SCENES, b={"seed": 0}, out_dir=str(tmp_path / "s")))
    assert all(row["linear_cka"] == pytest.approx(1.0) for row in same.cka)
    assert {(x["target"]) for x in same.retrieval} == {"object class", "predicate"}
    assert (tmp_path / "r" / "representation.png").is_file() and (tmp_path / "r" / "cka.parquet").is_file()
    assert [x["model"] for x in pq.read_table(tmp_path / "r" / "selectivity.parquet").to_pylist()] == [
        "tiny random (seed 0)", "tiny random (seed 1)"]
