"""Text bank benchmark: embed the 19,103-string vocabulary with the default encoder, and the
cost of scoring 128 pair vectors against it relative to a 50-string bank.

    python -m benchmarks.text_bank [--quick] [--out FILE]

Figures: ``embed_19103_s`` (seconds; issue 4 bounds 20,000 strings at 60 s on 2 cores),
``embed_strings_per_s``, ``score_ratio_19103_vs_50`` (scoring time against the large bank over
the small one, same run), and the two absolute scoring times for reference.
"""

from __future__ import annotations

import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmarks._common import best_of, run_benchmark  # noqa: E402
from relate.text.bank import TextBank, score_against_bank  # noqa: E402
from relate.text.encoders import DEFAULT_ENCODER, load_text_encoder  # noqa: E402
from relate.text.vocabulary import build_vocabulary  # noqa: E402

N_VOCAB, N_SMALL, N_PAIRS = 19_103, 50, 128


def measure(quick: bool) -> dict[str, float]:
    vocab = build_vocabulary(limit=N_VOCAB)
    if len(vocab) < N_VOCAB:
        raise RuntimeError(f"generated vocabulary has {len(vocab)} strings, need {N_VOCAB}")
    enc = load_text_encoder(DEFAULT_ENCODER)
    enc.encode(vocab[:256])  # warm-up: first-call allocations are not embedding cost
    t0 = time.perf_counter()
    matrix = enc.encode(vocab)
    embed_s = time.perf_counter() - t0
    big = TextBank(tuple(vocab), matrix, enc.name)
    small = TextBank(tuple(vocab[:N_SMALL]), matrix[:N_SMALL], enc.name)
    pairs = torch.randn(N_PAIRS, big.dim, generator=torch.Generator().manual_seed(0))
    reps = 5 if quick else 30
    # Each timed call scores 10 batches so the small-bank time is above timer noise.
    t_big = best_of(lambda: [score_against_bank(pairs, big) for _ in range(10)], reps) / 10
    t_small = best_of(lambda: [score_against_bank(pairs, small) for _ in range(10)], reps) / 10
    return {"embed_19103_s": round(embed_s, 3), "embed_strings_per_s": round(N_VOCAB / embed_s, 1),
            "score_ratio_19103_vs_50": round(t_big / t_small, 2),
            "score_19103_ms": round(1e3 * t_big, 3), "score_50_ms": round(1e3 * t_small, 4),
            "torch_threads": float(torch.get_num_threads()), "bank_dim": float(big.dim),
            "matrix_mb": round(matrix.nbytes / 2**20, 2), "finite": float(np.isfinite(matrix).all())}


if __name__ == "__main__":
    run_benchmark("text_bank", measure)
