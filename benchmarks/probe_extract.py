"""Feature-extraction throughput of the probe's zoo path (PIL image -> library transform ->
forward -> pre-logits feature): ViT-B/16 at 224 px, random weights, CPU, batch 32.

Figures: ``images_per_s`` (batched), ``loop_images_per_s`` (one image per call, the naive
baseline) and ``batched_over_loop`` (their ratio, measured in the same run).

    python -m benchmarks.probe_extract [--quick] [--out FILE]
"""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np

BATCH = 32


def _images(n: int, seed: int = 0):
    from PIL import Image

    rng = np.random.default_rng(seed)
    # Larger than 224 so the resize + centre crop of the model's own transform is exercised.
    return [Image.fromarray(rng.integers(0, 256, (256, 288, 3), dtype=np.uint8)) for _ in range(n)]


def measure(quick: bool) -> dict[str, float]:
    import torch

    from benchmarks._common import best_of
    from relate.zoo import ExtractorConfig, create_extractor

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    ex = create_extractor(ExtractorConfig(name="sup_vit_b16", pretrained=False, batch_size=BATCH))
    assert ex.preprocess.input_size == (224, 224), ex.preprocess
    ims = _images(BATCH)
    repeats = 1 if quick else 3
    n_loop = 4 if quick else BATCH
    ex.encode(ims[:1])  # warm-up: allocator, kernels
    t_batch = best_of(lambda: ex.encode(ims), repeats)
    t_loop = best_of(lambda: [ex.encode([im]) for im in ims[:n_loop]], repeats)
    batched = BATCH / t_batch
    looped = n_loop / t_loop
    return {
        "images_per_s": round(batched, 2),
        "loop_images_per_s": round(looped, 2),
        "batched_over_loop": round(batched / looped, 3),
        "batch_size": BATCH,
        "input_px": 224,
        "params_m": round(ex.num_params() / 1e6, 1),
        "torch_threads": torch.get_num_threads(),
    }


def main(argv: Sequence[str] | None = None) -> dict:
    from benchmarks._common import run_benchmark

    return run_benchmark("probe_extract", measure, argv)


if __name__ == "__main__":
    main()
