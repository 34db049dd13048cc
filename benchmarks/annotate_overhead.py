"""Per-image cost of everything in the annotation pipeline except the VLM itself.

Markers (image read, drawing, PNG encoding), prompt rendering and parsing for the three passes,
the gate with top-up, shard balancing and the Parquet write, run in one process with the
scripted backend, whose generate time is measured separately and excluded. Baseline: decoding
the same image files from disk once (the least a pipeline touching pixels must pay).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks._common import run_benchmark


def _records(root: Path, n: int):
    import pyarrow as pa
    from PIL import Image

    from relate.data.synthetic import SyntheticConfig, make_scene

    rows = []
    for i in range(n):
        s = make_scene(i, SyntheticConfig(seed=1))
        uri = root / f"{s.image_id}.png"
        Image.fromarray(s.image).save(uri)
        row = s.to_record(str(uri), "train")
        row["reference"] = row.pop("relations")  # the truth the scripted annotator starts from
        rows.append(dict(row, shard=f"train/part-{i // 64:05d}"))
    return pa.Table.from_pylist(rows)


def _run_once(records, cfg, out: Path) -> tuple[float, float]:
    from pipelines.annotate import _write_shard
    from pipelines.annotate_stages import GateStage, GenerateStage, MarkStage, ParseStage, PromptStage

    vlm = cfg.vlm.model_dump()
    mark = MarkStage(cfg.id_base, cfg.outlines, cfg.duplicate_person_rate, cfg.seed)
    steps = [(PromptStage(p, cfg.id_base), GenerateStage(vlm, p, cfg.id_base), ParseStage(p, cfg.id_base))
             for p in ("semantic", "grow", "spatial")]
    gate = GateStage(cfg.gate.model_copy(update={"balance": False}), cfg.topup)
    t_vlm, t0 = 0.0, time.perf_counter()
    rows = []
    for i in range(0, records.num_rows, cfg.cpu_batch_size):
        b = mark(records.slice(i, cfg.cpu_batch_size))
        for prompt, gen, parse in steps:
            b = prompt(b)
            tg = time.perf_counter()
            b = gen(b)
            t_vlm += time.perf_counter() - tg
            b = parse(b)
        rows += gate(b).to_pylist()
    shards: dict[str, list] = {}
    for r in rows:
        shards.setdefault(r["shard"], []).append(r)
    for s, group in shards.items():
        _write_shard(out, s, group, cfg.gate)
    return time.perf_counter() - t0 - t_vlm, t_vlm


def measure(quick: bool) -> dict[str, float]:
    from PIL import Image

    from pipelines.annotate import AnnotateConfig

    n = 64 if quick else 256
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        records = _records(root, n)
        cfg = AnnotateConfig(duplicate_person_rate=0.1)
        best, vlm = float("inf"), 0.0
        for k in range(2 if quick else 3):
            t, v = _run_once(records, cfg, root / f"out{k}")
            if t < best:
                best, vlm = t, v
        t0 = time.perf_counter()
        for uri in records.column("uri").to_pylist():
            with Image.open(uri) as im:
                np.asarray(im.convert("RGB"))
        t_read = time.perf_counter() - t0
    return {"non_vlm_ms_per_image": round(1000 * best / n, 3), "images": n,
            "scripted_generate_ms_per_image": round(1000 * vlm / n, 3),
            "non_vlm_over_image_decode_ratio": round(best / t_read, 2)}


if __name__ == "__main__":
    run_benchmark("annotate_overhead", measure)
