"""Smoke-run the text-student distillation job on Ray Train (2 CPU workers, gloo)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from relate.text.bank import build_bank, load_bank
from relate.text.encoders import load_text_encoder
from train_jobs.distill_text import DistillTextConfig, main


@pytest.mark.slow  # Ray Train start-up plus the MiniLM teacher pass: ~50-70 s on 2 cores
def test_distill_text_tiny_run(ray_session, tmp_path):
    cfg = DistillTextConfig.model_validate({
        "data": {"train_vocab_size": 700, "heldout_fraction": 0.25},
        "model": {"dim": 32, "width": 32, "heads": 2},
        "train": {"epochs": 2, "batch_size": 64, "pairs_per_kind": 16, "lr": 3e-3},
        "out_dir": str(tmp_path / "run"),
    })
    res = main(cfg)
    assert set(res.reports) == {"teacher/trained", "teacher/held-out", "student/trained", "student/held-out"}
    assert res.reports["student/trained"]["dim"] == 32 and res.reports["teacher/trained"]["dim"] == 384
    assert all(math.isfinite(v) for r in res.reports.values() for v in r.values() if isinstance(v, float))
    assert set(res.acceptance) == {"trained", "held-out"}
    assert "| student (student), held-out groups | 32 |" in res.markdown
    assert res.history and res.history[-1]["epoch"] == 1 and res.history[-1]["step"] > 0
    # Antonym repulsion acts on the trained pairs even in a two-epoch run.
    assert res.reports["student/trained"]["inv_cos"] < res.reports["teacher/trained"]["inv_cos"]

    # The saved student is an encoder by registry name: no out-of-vocabulary strings.
    name = f"student:{res.student_dir}"
    enc = load_text_encoder(name, cache=False)
    out = enc.encode(["above", "zorbly quixotic beneath", "far below"])
    assert out.shape == (3, 32) and np.allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    bank = build_bank(["above", "below", "standing far above"], name, encoder=enc)
    path = bank.save(tmp_path / "student_bank.npz")
    assert load_bank(path, expect_encoder=name, expect_dim=32).strings == bank.strings
