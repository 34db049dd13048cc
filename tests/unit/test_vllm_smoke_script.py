"""scripts/gpu_smoke.sh and its vLLM step (scripts/vllm_smoke.py) hold up on CPU as far as they can:
the shell script parses and uses the current ray.data.llm API, and the Python step's import path,
synthetic world and annotation config are those of our vLLM annotation processor."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_gpu_smoke_script_parses_and_runs_our_processor_not_the_removed_api():
    subprocess.run(["bash", "-n", str(ROOT / "scripts" / "gpu_smoke.sh")], check=True)
    text = (ROOT / "scripts" / "gpu_smoke.sh").read_text()
    assert "build_llm_processor" not in text  # gone from ray.data.llm (build_processor replaced it)
    assert "-m scripts.vllm_smoke" in text and "Qwen/Qwen2-VL-2B-Instruct" in text


def test_vllm_smoke_world_and_config_are_our_vllm_annotation_processor(tmp_path):
    from actors.vlm.vllm_data import build_vllm_processor_config
    from pipelines.annotate import shard_plan
    from scripts import vllm_smoke

    world = vllm_smoke.write_world(tmp_path / "world", 3)
    assert pq.read_table(world / "corpus" / "train" / "part-0.parquet").num_rows == 3
    cfg = vllm_smoke.smoke_config(world, tmp_path / "out", vllm_smoke.DEFAULT_MODEL)
    assert cfg.vlm.backend == "vllm" and cfg.generate.resources.num_gpus == 1
    assert shard_plan(cfg).num_rows == 3
    pc = build_vllm_processor_config(cfg.vlm.vllm, cfg.generate.resources, cfg.cpu_resources.num_cpus)
    assert pc.model_source == "Qwen/Qwen2-VL-2B-Instruct" and pc.engine_kwargs["limit_mm_per_prompt"] == {"image": 1}
    assert pc.should_continue_on_error and pc.placement_group_config["bundle_per_worker"] == {"CPU": 1.0, "GPU": 1.0}
