"""train_jobs.calibrate end to end on a tiny synthetic corpus and a tiny random checkpoint: the fit is
installed, the report and reliability diagram are written, and thresholds then work in relate.api and
in the Serve relation deployment (called directly, no Ray instance)."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

VAL_IMAGES = 8


def _write_corpus(out: Path) -> Path:
    from relate.data.synthetic import SyntheticConfig
    from relate.data.synthetic_corpus import write_corpus

    world = SyntheticConfig(num_scenes=2 * VAL_IMAGES, min_size=64, max_size=96, max_objects=6)
    return write_corpus(out, world, lambda i: "val" if i % 2 == 0 else "train")


def _arranged_checkpoints(root: Path, corpus: Path) -> tuple[Path, Path]:
    """Two tiny random checkpoints with the same weights and bank rows, the rows dealt to the lexicon's
    strings so that the strings annotated most often on val get the rows that score highest (first)
    or lowest (second): the fused logit then carries signal of a known sign, whatever the seed."""
    from relate.api import load_model
    from relate.data.corpus import read_corpus
    from relate.data.lexicon import all_surface_forms
    from relate.model.score import relation_logit
    from serve_apps.tiny import save_tiny_checkpoint
    from train_jobs.relation_data import concept_key

    forms = all_surface_forms()
    pred = load_model(save_tiny_checkpoint(root / "probe", forms))
    val = read_corpus(corpus, "val")
    scores = pred.score_images(val.column("uri").to_pylist(), val.column("boxes").to_pylist())
    w = pred.model.cfg.pair_weight
    mean = np.concatenate([relation_logit(s.l_pred, s.l_pair, w) for s in scores]).mean(axis=0)
    freq = Counter(concept_key(r["predicate"], "synthetic_lexicon")
                   for rels in val.column("relations").to_pylist() for r in rels)
    by_freq = sorted(forms, key=lambda f: -freq[concept_key(f, "synthetic_lexicon")])
    out = []
    for name, rows in (("good", np.argsort(-mean)), ("reversed", np.argsort(mean))):
        strings = [""] * len(forms)
        for k, r in enumerate(rows):
            strings[r] = by_freq[k]
        out.append(save_tiny_checkpoint(root / name, strings))
    return out[0], out[1]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("calib")
    corpus = _write_corpus(root / "synth")
    good, reversed_ = _arranged_checkpoints(root, corpus)
    raw = root / "raw"
    shutil.copytree(good, raw)  # an uncalibrated twin of the checkpoint the CLI calibrates
    return {"root": root, "corpus": corpus, "ckpt": good, "reversed": reversed_, "raw": raw}


@pytest.fixture(scope="module")
def calibrated(world):
    from train_jobs.calibrate import _cli

    res = _cli(["--checkpoint", str(world["ckpt"]), "--on", "val", "--corpus-root", str(world["corpus"]),
                "--set", "folds=4"])
    return {**world, "result": res}


def test_cli_fits_installs_and_reports(calibrated):
    from PIL import Image

    ckpt, res = calibrated["ckpt"], calibrated["result"]
    stored = json.loads((ckpt / "calibration.json").read_text())
    rep = json.loads(Path(res.report_path).read_text())
    assert res.installed and rep["installed"] and Path(res.report_path).parent == ckpt / "calibration"
    copy = json.loads((ckpt / "calibration" / "calibration.json").read_text())
    assert stored == {"a": rep["a"], "b": rep["b"]} == copy
    assert rep["a"] > 0 and np.isfinite(rep["b"])
    assert rep["ece_after"] < rep["ece_before"]  # random weights: the raw sigmoid is badly scaled
    info = rep["fitted_on"]
    assert info["kind"] == "split" and info["images"] == VAL_IMAGES and info["vocabulary_size"] == 52
    assert rep["n_cells"] == info["cells_scored"] and info["cell_fraction"] == 1.0
    assert 0 < info["annotated_triples_scored"] <= info["annotated_triples"] <= rep["n_positive"] < rep["n_cells"]
    assert rep["prevalence"] == pytest.approx(rep["n_positive"] / rep["n_cells"])
    for key in ("before", "after", "in_sample"):
        assert sum(rep["bins"][key]["count"]) == rep["n_cells"] and len(rep["bins"][key]["hit_rate"]) == rep["n_bins"]
    with Image.open(res.figure_path) as im:
        assert im.format == "PNG" and im.size[0] > 0 and im.size[1] > 0
        im.load()


def test_thresholds_work_after_calibration(calibrated):
    from scipy.special import expit

    from relate.api import load_model
    from relate.data.corpus import read_corpus
    from relate.model.score import relation_logit

    pred, raw = load_model(calibrated["ckpt"]), load_model(calibrated["raw"])
    a, b = pred.calibration.a, pred.calibration.b
    row = read_corpus(calibrated["corpus"], "val").to_pylist()[0]
    img, boxes = row["uri"], [[x["x1"], x["y1"], x["x2"], x["y2"]] for x in row["boxes"]]
    with pytest.raises(ValueError, match="calibrated"):
        raw.predict(img, boxes, threshold=0.5)
    full = pred.predict(img, boxes, topk=10_000)
    thr = float(np.median([t["score"] for t in full]))
    kept = pred.predict(img, boxes, topk=10_000, threshold=thr)
    assert 0 < len(kept) < len(full) and all(t["score"] >= thr for t in kept)
    assert kept == [t for t in full if t["score"] >= thr]
    s = pred.score_images([img], [boxes])[0]  # the scores are sigmoid(a z + b) of the fused logit
    z = relation_logit(s.l_pred, s.l_pair, pred.model.cfg.pair_weight)
    col = {p: j for j, p in enumerate(pred.vocabulary)}
    row_of = {(int(x), int(y)): i for i, (x, y) in enumerate(s.pairs)}
    for t in kept[:20]:
        zc = z[row_of[(t["subject"], t["object"])], col[t["predicate"]]]
        assert t["score"] == pytest.approx(expit(a * zc + b), rel=1e-5)
    # a monotone map: the ranking is the uncalibrated checkpoint's
    key = lambda ts: [(t["subject"], t["object"], t["predicate"]) for t in ts]  # noqa: E731
    assert key(pred.predict(img, boxes, topk=30)) == key(raw.predict(img, boxes, topk=30))


def test_serve_deployment_accepts_threshold_with_calibrated_checkpoint(calibrated):
    from serve_apps.config import RelationSettings
    from serve_apps.deployments.relation import RelationModelDeployment

    dep = RelationModelDeployment.func_or_class(RelationSettings(checkpoint=str(calibrated["ckpt"])))
    raw = RelationModelDeployment.func_or_class(RelationSettings(checkpoint=str(calibrated["raw"])))
    img = np.random.default_rng(0).integers(0, 255, (40, 60, 3), dtype=np.uint8)
    req = {"image": img, "regions": np.array([[0, 0, 20, 20], [30, 5, 59, 39], [5, 20, 40, 39]], float),
           "vocabulary": None, "bank": None, "topk": 1000}
    full = dep._score_many([{**req, "threshold": None}])[0]["triplets"]
    thr = float(np.median([t["score"] for t in full]))
    out = dep._score_many([{**req, "threshold": thr}])[0]
    assert "error" not in out and out["calibrated"] is True and dep.info()["calibrated"] is True
    assert 0 < len(out["triplets"]) < len(full) and all(t["score"] >= thr for t in out["triplets"])
    direct = dep.predictor.predict(img, req["regions"], topk=1000, threshold=thr)
    assert [t["score"] for t in out["triplets"]] == pytest.approx([t["score"] for t in direct], abs=1e-6)
    assert "calibrated" in raw._score_many([{**req, "threshold": thr}])[0]["error"]


def test_negative_slope_is_reported_and_not_installed(world, tmp_path):
    from train_jobs.calibrate import CalibrateConfig, main

    ckpt = tmp_path / "rev"
    shutil.copytree(world["reversed"], ckpt)
    with pytest.raises(ValueError, match="not positive"):
        main(CalibrateConfig(checkpoint=str(ckpt), on="val", corpus_root=str(world["corpus"]), folds=3))
    assert json.loads((ckpt / "calibration.json").read_text()) == {"a": None, "b": None}
    rep = json.loads((ckpt / "calibration" / "calibration_report.json").read_text())
    assert rep["a"] < 0 and rep["installed"] is False and "reverse" in rep["not_installed_because"]


def test_fit_on_adjudicated_negatives_of_a_benchmark(world, tmp_path):
    from relate.data.corpus import read_corpus
    from relate.data.export import synthesize_negatives, write_haystack
    from relate.schema import CORPUS_SCHEMA, to_table
    from train_jobs.calibrate import CalibrateConfig, main

    val = read_corpus(world["corpus"], "val")  # the PSG layout knows train and test: val rows land in train
    cells = synthesize_negatives(val)
    bench = write_haystack(val, tmp_path / "haystack", cells=cells)
    res = main(CalibrateConfig(checkpoint=str(world["raw"]), on=f"haystack:{bench}", benchmark_split="train",
                               install=False, folds=3, out_dir=str(tmp_path / "out")))
    labels = [c["label"] for r in cells.to_pylist() for c in r["cells"]]
    info = res.report["fitted_on"]
    assert info["kind"] == "benchmark" and info["reader"] == "haystack" and info["images"] == VAL_IMAGES
    assert info["cells_labelled"] == len(labels) and res.report["n_cells"] == len(labels) - info["cells_uncovered"]
    assert info["cells_uncovered"] or res.report["n_positive"] == sum(labels)
    assert not res.installed and json.loads((world["raw"] / "calibration.json").read_text())["a"] is None
    assert (tmp_path / "out" / "calibration_report.json").is_file() and (tmp_path / "out" / "reliability.png").is_file()
    # each cell's logit is the fused logit at its own pair and predicate
    from relate.api import load_model
    from relate.data.readers import read_benchmark
    from train_jobs.calibrate import benchmark_cells

    pred = load_model(world["raw"])
    z, y, _ = benchmark_cells(pred, CalibrateConfig(checkpoint=str(world["raw"]), on=f"haystack:{bench}",
                                                    benchmark_split="train", limit=1))
    native = read_benchmark("haystack", str(bench), split="train")  # as the job reads it (JPEG pixels)
    first = native.corpus.to_pylist()[0]
    first_cells = {r["image_id"]: r["cells"] for r in native.cells.to_pylist()}[first["image_id"]]
    vocab = sorted({c["predicate"] for c in first_cells})
    s = pred.score_images([first["uri"]], [first["boxes"]], vocab)[0]
    row_of = {(int(a), int(b)): i for i, (a, b) in enumerate(s.pairs)}
    w = pred.model.cfg.pair_weight
    want = [(s.l_pred[row_of[c["subject"], c["object"]], vocab.index(c["predicate"])]
             + w * s.l_pair[row_of[c["subject"], c["object"]]], c["label"])
            for c in first_cells if (c["subject"], c["object"]) in row_of]
    assert len(want) > 0
    np.testing.assert_allclose(z, [v for v, _ in want], rtol=1e-5)
    np.testing.assert_array_equal(y, [lab for _, lab in want])


def test_calibrate_checkpoint_for_the_train_job(world, tmp_path):
    from train_jobs.calibrate import calibrate_checkpoint
    from train_jobs.relation_data import DataConfig
    from train_jobs.train_relation import RunSettings

    assert RunSettings().calibrate is True
    ckpt = tmp_path / "ck"
    shutil.copytree(world["ckpt"], ckpt)
    rep = calibrate_checkpoint(ckpt, DataConfig(corpus_root=str(world["corpus"])), split="val", limit=4)
    assert rep["installed"] and rep["fitted_on"]["images"] == 4
    assert json.loads((ckpt / "calibration.json").read_text()) == {"a": rep["a"], "b": rep["b"]}


def test_config_and_checkpoint_errors(tmp_path):
    from relate.checkpoint import CheckpointError, write_calibration
    from relate.metrics.calibration import Calibration
    from train_jobs.calibrate import CalibrateConfig

    with pytest.raises(ValueError, match="READER:PATH"):
        CalibrateConfig(checkpoint=str(tmp_path), on="validation")
    assert CalibrateConfig(checkpoint="s3://bucket/ckpt", on="val").checkpoint == "s3://bucket/ckpt"  # fitted on a copy
    # the reported split is refused by default, for corpus and benchmark fits alike; a benchmark names its split
    with pytest.raises(ValueError, match="on=test: calibrating on the reported split"):
        CalibrateConfig(checkpoint=str(tmp_path), on="test")
    with pytest.raises(ValueError, match="benchmark_split=test: calibrating on the reported split"):
        CalibrateConfig(checkpoint=str(tmp_path), on="spatialsense:/d", benchmark_split="test")
    with pytest.raises(ValueError, match="needs benchmark_split"):
        CalibrateConfig(checkpoint=str(tmp_path), on="spatialsense:/d")
    assert CalibrateConfig(checkpoint=str(tmp_path), on="test", fit_on_reported_split=True).on == "test"
    assert CalibrateConfig(checkpoint=str(tmp_path), on="hico_det:/d", benchmark_split="train").benchmark_split == "train"
    with pytest.raises(CheckpointError, match="not a relation checkpoint"):
        write_calibration(tmp_path, Calibration(1.0, 0.0))


class _StubPredictor:
    """Known logits for one image: pairs (0, 1), (1, 0), (0, 2) over a four-string vocabulary."""

    vocabulary = ("left of", "right of", "on top of", "near")

    class model:  # noqa: N801 - mimics predictor.model.cfg.pair_weight
        class cfg:  # noqa: N801
            pair_weight = 0.5

    def score_images(self, images, regions, vocabulary=None):
        from relate.api import ImageScores

        z = np.zeros((3, 4))
        return [ImageScores(np.array([[0, 1], [1, 0], [0, 2]]), np.arange(12.0).reshape(3, 4),
                            np.array([1.0, 2.0, 3.0]), z, z, np.zeros((4, 4)), 1.0, 0.0) for _ in images]


def test_split_cells_hand_worked(world, tmp_path):
    """Hits are annotated triples, directional and synonym-tolerant; a pruned pair has no cells."""
    import pyarrow.parquet as pq

    from relate.data.corpus import read_corpus
    from relate.schema import CORPUS_SCHEMA, to_table
    from train_jobs.calibrate import CalibrateConfig, split_cells

    row = read_corpus(world["corpus"], "val").to_pylist()[0]
    rel = lambda s, o, p: {"subject": s, "object": o, "predicate": p, "pass": "human", "gate": "kept",  # noqa: E731
                           "score": None}
    row["relations"] = [rel(0, 1, "to the left of"), rel(1, 0, "on the right side of"), rel(2, 0, "on")]
    (tmp_path / "corpus" / "val").mkdir(parents=True)
    pq.write_table(to_table([row], CORPUS_SCHEMA), tmp_path / "corpus" / "val" / "part-0.parquet")
    cfg = CalibrateConfig(checkpoint=str(tmp_path), on="val", corpus_root=str(tmp_path))
    z, y, info = split_cells(_StubPredictor(), cfg)
    np.testing.assert_allclose(z, (np.arange(12.0).reshape(3, 4) + 0.5 * np.array([1.0, 2.0, 3.0])[:, None]).ravel())
    want = np.zeros((3, 4), bool)
    want[0, 0] = want[1, 1] = True  # (0, 1) left of; (1, 0) right of; (2, 0) "on" was never scored
    np.testing.assert_array_equal(y, want.ravel())
    assert info["annotated_triples"] == 3 and info["annotated_triples_scored"] == 2 and info["cells_scored"] == 12
    _, y_exact, _ = split_cells(_StubPredictor(), cfg.model_copy(update={"match": "exact"}))
    assert not y_exact.any()  # the annotated strings are other surface forms of the same groups


def test_train_job_calibrates_its_final_checkpoint(world, tmp_path, monkeypatch, capsys):
    """train_relation.main after fit(): calibrates a local checkpoint, survives a failed fit (Ray and the
    trainer are stubbed: only the step after training runs; a checkpoint in a bucket, through Ray's own
    filesystem object, is tests/ray/test_train_uri_storage.py)."""
    import ray
    from pyarrow import fs as pafs

    import train_jobs.train_relation as job

    class _Fit:
        def __init__(self, path):
            self.checkpoint = type("C", (), {"path": path, "filesystem": pafs.LocalFileSystem()})()
            self.metrics = {}

    good, bad = tmp_path / "good", tmp_path / "bad"
    shutil.copytree(world["ckpt"], good)
    shutil.copytree(world["reversed"], bad)
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    cfg = job.TrainRelationConfig.model_validate({"data": {"corpus_root": str(world["corpus"])},
                                                  "run": {"evaluate_test": False}})
    for path in (str(good), str(bad)):
        monkeypatch.setattr(job, "build_trainer", lambda _cfg, p=path: type("T", (), {"fit": lambda self: _Fit(p)})())
        res = job.main(cfg)
        assert res.checkpoint == path
    out = capsys.readouterr().out
    assert f"calibration not installed in {bad}" in out and "not positive" in out
    assert json.loads((good / "calibration.json").read_text())["a"] > 0
    assert json.loads((bad / "calibration.json").read_text()) == {"a": None, "b": None}
    off = cfg.model_copy(update={"run": cfg.run.model_copy(update={"calibrate": False})})
    shutil.rmtree(good / "calibration")
    monkeypatch.setattr(job, "build_trainer", lambda _cfg: type("T", (), {"fit": lambda self: _Fit(str(good))})())
    assert job.main(off).calibration == {} and not (good / "calibration").exists()


def test_cli_calibrates_a_checkpoint_in_an_s3_bucket(world):
    """``--checkpoint s3://...``: fitted on a verified local copy; only calibration.json changes in the
    bucket and the report folder is uploaded beside it; a refused map leaves the bucket's map alone."""
    from _s3_endpoint import SECRET, s3_endpoint
    from relate.api import load_model
    from relate.checkpoint import CheckpointError
    from train_jobs.calibrate import CalibrateConfig, _cli, main

    names = ("config.yaml", "model.safetensors", "text_bank.npz", "meta.json")
    with s3_endpoint() as s3:
        s3.make_bucket("cal")
        s3.upload(world["raw"], "cal/raw")
        s3.upload(world["reversed"], "cal/rev")
        before = {n: s3.read(f"cal/raw/{n}") for n in names}
        uri = s3.uri("cal/raw", credentials=True)
        res = _cli(["--checkpoint", uri, "--on", "val", "--corpus-root", str(world["corpus"]), "--set", "folds=3"])
        assert res.installed and json.loads(s3.read("cal/raw/calibration.json")) == {"a": res.calibration.a,
                                                                                  "b": res.calibration.b}
        assert {n: s3.read(f"cal/raw/{n}") for n in names} == before
        report = json.loads(s3.read("cal/raw/calibration/calibration_report.json"))
        assert report["installed"] and report["a"] == res.calibration.a and report["checkpoint"] == s3.uri("cal/raw")
        assert s3.read("cal/raw/calibration/reliability.png")[:8] == b"\x89PNG\r\n\x1a\n"
        assert res.report_path == s3.uri("cal/raw/calibration/calibration_report.json") and SECRET not in res.report_path
        assert load_model(uri).calibration == res.calibration

        with pytest.raises(ValueError, match="not positive"):
            main(CalibrateConfig(checkpoint=s3.uri("cal/rev", credentials=True), on="val",
                                 corpus_root=str(world["corpus"]), folds=3))
        assert json.loads(s3.read("cal/rev/calibration.json")) == {"a": None, "b": None}
        assert json.loads(s3.read("cal/rev/calibration/calibration_report.json"))["installed"] is False
        with pytest.raises(CheckpointError, match=r"s3://cal/absent\?.*not a relation checkpoint"):
            main(CalibrateConfig(checkpoint=s3.uri("cal/absent", credentials=True), on="val",
                                 corpus_root=str(world["corpus"])))
