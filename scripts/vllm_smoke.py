"""GPU smoke test of our vLLM path: the annotation job's own ``ray.data.llm`` processor on a tiny VLM.

Writes a few synthetic images (a corpus in the project layout), then runs ``pipelines.annotate``
with ``vlm.backend=vllm``: our prompt and image stage, Ray's chat-template, tokenize, vLLM engine
and detokenize stages, our parse and gate stages, all three passes. Passes when every call was
answered (no engine failures), every image is written and the run is complete; the answers of a
2B model need not be good relations. Needs a GPU and vllm (``pip install -e '.[gpu]'``); run by
``scripts/gpu_smoke.sh``, or alone:

    python -m scripts.vllm_smoke [--model Qwen/Qwen2-VL-2B-Instruct] [--images 4] [--out DIR]

The model must be in the Hugging Face cache (``huggingface-cli download MODEL``) unless the
environment allows downloads.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pipelines.annotate import AnnotateConfig

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DEFAULT_MODEL = "Qwen/Qwen2-VL-2B-Instruct"  # a small vision-language model vLLM serves on one GPU
ENGINE_KWARGS = {"max_model_len": 4096, "limit_mm_per_prompt": {"image": 1}, "gpu_memory_utilization": 0.5,
                 "enforce_eager": True}


def write_world(root: Path, n: int, seed: int = 3) -> Path:
    """``n`` synthetic images and their corpus records (boxes; reference relations unused by vLLM)."""
    import pyarrow.parquet as pq
    from PIL import Image

    from relate.data.synthetic import SyntheticConfig, make_scene
    from relate.schema import CORPUS_SCHEMA, to_table

    world = SyntheticConfig(seed=seed)
    (root / "images").mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        s = make_scene(i, world)
        uri = root / "images" / f"{s.image_id}.png"
        Image.fromarray(s.image).save(uri)
        rows.append(dict(image_id=s.image_id, uri=str(uri), width=s.image.shape[1], height=s.image.shape[0],
                         source="synthetic", split="train", boxes=s.boxes, relations=[]))
    (root / "corpus" / "train").mkdir(parents=True, exist_ok=True)
    pq.write_table(to_table(rows, CORPUS_SCHEMA), root / "corpus" / "train" / "part-0.parquet")
    return root


def smoke_config(world: Path, out: Path, model: str) -> AnnotateConfig:
    """The annotation job's config for the smoke run: the vLLM backend on one whole GPU."""
    from pipelines.annotate import AnnotateConfig

    return AnnotateConfig.model_validate(dict(
        input_dir=str(world), out_dir=str(out), splits=["train"], shard_size=4, cpu_batch_size=4,
        cpu_resources=dict(num_cpus=0.25),
        vlm=dict(backend="vllm", vllm=dict(model_source=model, batch_size=4, engine_kwargs=ENGINE_KWARGS,
                                           sampling=dict(temperature=0.0, max_tokens=256))),
        generate=dict(resources=dict(num_cpus=1, num_gpus=1))))


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=DEFAULT_MODEL, help=f"hub id or local folder of a VLM (default {DEFAULT_MODEL})")
    ap.add_argument("--images", type=int, default=4, help="synthetic images to annotate")
    ap.add_argument("--out", default=None, help="run folder (default: a temporary one)")
    args = ap.parse_args(argv)
    import ray

    from pipelines.annotate import main as annotate

    base = Path(args.out or tempfile.mkdtemp(prefix="vllm-smoke-"))
    cfg = smoke_config(write_world(base / "world", args.images), base / "annotated", args.model)
    ray.init(ignore_reinit_error=True, include_dashboard=False, log_to_driver=False)
    res = annotate(cfg)
    vlm = res.stats.get("vlm", {})
    calls = int(vlm.get("calls", 0))
    summary = {"model": args.model, "images": args.images, "calls": calls, "failed_calls": vlm.get("failed_calls", {}),
               "relations": res.stats.get("relations"), "complete": res.complete, "out": str(cfg.out_dir)}
    print(json.dumps(summary, indent=1))
    problems = []
    if calls < args.images:
        problems.append(f"{calls} VLM calls for {args.images} images")
    if vlm.get("failed_calls") or not res.complete:
        problems.append(f"failed calls {vlm.get('failed_calls')}; complete={res.complete} (see {cfg.out_dir}/failures)")
    if problems:
        raise SystemExit("vLLM smoke FAILED: " + "; ".join(problems))
    return summary


if __name__ == "__main__":
    main()
