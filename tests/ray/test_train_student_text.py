"""The distilled student as the relation model's training text space (seed 001, 3.3: the paper trains
against its 512-d student): the bank is built by the student, the checkpoint records it, and
relate.api loads the checkpoint offline and embeds new vocabularies with the same student."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from relate.config import load_config

CONFIG = Path(__file__).resolve().parents[2] / "train_jobs" / "configs" / "cpu_small.yaml"


def _tiny_student(folder: Path) -> Path:
    """A random-weight 32-d student over the packaged MiniLM teacher: the text space, not its quality,
    is under test here."""
    from relate.text.student import create_text_student, save_student

    torch.manual_seed(0)
    return save_student(folder, create_text_student(384, dim=32, width=32, layers=0, hidden=64), "minilm")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from relate.data.synthetic import SyntheticConfig
    from relate.data.synthetic_corpus import write_corpus

    world = SyntheticConfig(num_scenes=16, min_size=64, max_size=96, max_objects=5)
    return write_corpus(tmp_path_factory.mktemp("synth"), world, lambda i: "val" if i % 4 == 0 else "train")


def _cfg(corpus: Path, storage: Path, encoder: str, text_dim: int):
    from train_jobs.train_relation import TrainRelationConfig

    over = [f"data.corpus_root={corpus}", f"run.storage_path={storage}", "run.name=student_text",
            f"data.text_encoder={encoder}", f"model.text_dim={text_dim}",
            "model.backbone.img_size=32", "model.backbone.depth=1", "model.backbone.taps=[-1]",
            "model.dim=32", "model.scene_grid=2", "model.sampler.geometry_keep=16", "model.sampler.learned_keep=8",
            "data.rungs=[1.0]", "optim.batch_size=4", "optim.max_steps=2", "optim.warmup_steps=1",
            "run.checkpoint_every=2", "run.val_images=4", "run.evaluate_test=false", "run.calibrate=false",
            "run.log_every=100", "run.num_workers=1", "run.worker.num_cpus=0.5", "data.cooccurrence='off'",
            f"data.cache_dir={storage / 'cache'}"]
    return load_config(TrainRelationConfig, CONFIG, over)


def test_relative_student_folder_is_recorded_absolute(tmp_path, monkeypatch):
    from train_jobs.relation_data import DataConfig

    monkeypatch.chdir(tmp_path)
    assert DataConfig(text_encoder="student:runs/s").text_encoder == f"student:{tmp_path / 'runs' / 's'}"
    assert DataConfig(text_encoder=" minilm ").text_encoder == "minilm"


def test_student_width_must_match_the_model(corpus, tmp_path):
    from train_jobs.relation_data import build_space

    student = _tiny_student(tmp_path / "student")
    cfg = _cfg(corpus, tmp_path, f"student:{student}", 384)
    with pytest.raises(ValueError, match="gives 32-d vectors but model.text_dim=384"):
        build_space(cfg.data, cfg.model.text_dim)
    with pytest.raises(ValueError, match="not a saved text student"):
        build_space(_cfg(corpus, tmp_path, f"student:{tmp_path / 'nowhere'}", 32).data, 32)


@pytest.mark.slow  # one Ray Train worker for two steps: ~40 s on 2 shared cores
def test_train_relation_against_a_student_text_space(ray_session, corpus, tmp_path):
    from relate.api import load_model
    from relate.text.encoders import load_text_encoder
    from train_jobs.train_relation import main

    student = _tiny_student(tmp_path / "student")
    name = f"student:{student.resolve()}"
    res = main(_cfg(corpus, tmp_path / "ray", name, 32))
    assert res.checkpoint and res.metrics["step"] == 2
    meta = json.loads((Path(res.checkpoint) / "meta.json").read_text())
    assert meta["text_encoder"] == name  # the checkpoint records the student, by an absolute folder

    pred = load_model(res.checkpoint)
    assert pred.text_encoder == name and pred.bank.dim == 32
    enc = load_text_encoder(name, cache=False)
    np.testing.assert_allclose(pred.bank.matrix, enc.encode(list(pred.bank.strings)), atol=1e-5)
    # A vocabulary the run never saw is embedded by the same student, offline, and scored.
    vocab = ["far above", "standing just left of", "glorbishly beneath"]
    got = pred._bank_for(vocab)[0]
    assert got.encoder == name
    np.testing.assert_allclose(got.matrix, enc.encode(vocab), atol=1e-5)
    from relate.data.corpus import read_corpus

    row = read_corpus(corpus, "val").slice(0, 1).to_pylist()[0]
    triplets = pred.predict(row["uri"], row["boxes"], vocabulary=vocab, topk=5)
    assert triplets and {t["predicate"] for t in triplets} <= set(vocab)
    assert all(np.isfinite(t["score"]) for t in triplets)
