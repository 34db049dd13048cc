"""vLLM on GPU clusters through ``ray.data.llm``: the engine is a Ray Data processor stage.

We do not hand-roll engine actors, batching or chat templating: ``vLLMEngineProcessorConfig``
plus ``build_processor`` provide them. This module only maps our config onto theirs and our
rows (``prompt``, marked ``image_png``) onto OpenAI-style chat messages with the image as a
data URL, which vLLM's multimodal stage decodes. ``vllm`` itself is imported by Ray's stages on
the GPU workers; nothing here imports it, so the configuration can be built and tested anywhere.
"""

from __future__ import annotations

import base64
from typing import Any

from actors.vlm.configs import VLLMConfig
from relate.placement import ResourcesConfig

__all__ = ["engine_bundle", "build_vllm_processor_config", "build_vllm_processor", "vllm_preprocess",
           "vllm_outcomes", "TEXT_COLUMN", "ERROR_COLUMN", "ATTEMPTS_COLUMN", "ENGINE_ERROR"]

TEXT_COLUMN = "vlm_text"
ERROR_COLUMN = "vlm_error"  # JSON {kind, message} of a failed call, null when the call answered
ATTEMPTS_COLUMN = "vlm_attempts"  # requests made for the call (1 + retries)
ENGINE_ERROR = "engine_error"
_RAY_ERROR = "__inference_error__"  # ray.data.llm's per-row error column (should_continue_on_error)
_ENGINE_COLUMNS = ("messages", "sampling_params", "prompt_token_ids", "generated_tokens", "generated_text",
                   "multimodal_data", "image", "prompt", _RAY_ERROR)


def engine_bundle(res: ResourcesConfig) -> dict[str, float]:
    """One engine's placement bundle: CPU, a GPU (fraction) and custom resources such as ``annotator``.

    ray.data.llm turns a single-GPU engine's bundle into the ``num_cpus``/``num_gpus``/``resources``
    of its ``map_batches`` stage, so a fraction packs several engines on one GPU.
    """
    if res.num_gpus == 0:
        raise ValueError("a vLLM engine needs a GPU: set num_gpus > 0 in its resources (e.g. 1, or 0.5 to pack two)")
    return {"CPU": res.num_cpus, "GPU": res.num_gpus, **res.resources}


def build_vllm_processor_config(cfg: VLLMConfig, resources: ResourcesConfig | None = None) -> Any:
    """The ``ray.data.llm.vLLMEngineProcessorConfig`` for ``cfg`` (multimodal stage enabled).

    ``resources`` (per engine) sets the placement bundle and, unless ``cfg`` pins one already, the
    accelerator type; without it Ray's default applies (one whole GPU per engine, anywhere).
    """
    from ray.data.llm import PrepareMultimodalStageConfig, vLLMEngineProcessorConfig

    accelerator = cfg.accelerator_type
    extra: dict[str, Any] = {}
    if resources is not None:
        if accelerator and resources.accelerator_type and accelerator != resources.accelerator_type:
            raise ValueError(f"vllm.accelerator_type={accelerator!r} disagrees with the engine resources' "
                             f"accelerator_type={resources.accelerator_type!r}; set one of them")
        accelerator = accelerator or resources.accelerator_type
        extra["placement_group_config"] = {"bundle_per_worker": engine_bundle(resources)}
    return vLLMEngineProcessorConfig(
        model_source=cfg.model_source,
        engine_kwargs=dict(cfg.engine_kwargs),
        batch_size=cfg.batch_size,
        concurrency=cfg.concurrency,
        accelerator_type=accelerator,
        runtime_env=cfg.runtime_env,
        prepare_multimodal_stage=PrepareMultimodalStageConfig(enabled=True),
        chat_template_stage=True,
        tokenize_stage=True,
        detokenize_stage=True,
        should_continue_on_error=True,  # a failed row keeps its error (vllm_outcomes records it), the job goes on
        **extra,
    )


def vllm_preprocess(row: dict, cfg: VLLMConfig) -> dict:
    """Row with ``prompt`` and ``image_png`` -> the same row plus chat ``messages`` and sampling."""
    url = "data:image/png;base64," + base64.b64encode(row["image_png"]).decode("ascii")
    s = cfg.sampling
    return dict(row,
                messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}},
                                                       {"type": "text", "text": row["prompt"]}]}],
                sampling_params=dict(temperature=s.temperature, top_p=s.top_p, max_tokens=s.max_tokens))


def _postprocess(row: dict) -> dict:
    from actors.vlm.base import COMPLETION_TOKENS_COLUMN, LATENCY_COLUMN, PROMPT_TOKENS_COLUMN

    out = {k: v for k, v in row.items() if k not in _ENGINE_COLUMNS or k == "prompt"}
    out[TEXT_COLUMN] = str(row.get("generated_text") or "")
    # the engine stage's own counts and timing (num_input_tokens = len(prompt_token_ids) as tokenized,
    # num_generated_tokens, time_taken_llm per request); absent ones stay None ("not reported")
    for col, key in ((PROMPT_TOKENS_COLUMN, "num_input_tokens"), (COMPLETION_TOKENS_COLUMN, "num_generated_tokens")):
        v = row.get(key)
        out[col] = int(v) if v is not None and v >= 0 else None
    t = row.get("time_taken_llm")
    out[LATENCY_COLUMN] = float(t) if t is not None and t >= 0 else None
    return out


def vllm_outcomes(batch: Any) -> Any:
    """After the processor: a row the engine failed on (ray.data.llm bypasses our postprocess for
    it and returns its raw data with ``__inference_error__``) becomes a recorded engine failure
    (``vlm_error``), every other row an answer; engine columns are dropped either way."""
    import json

    import pyarrow as pa

    rows = batch.to_pylist() if isinstance(batch, pa.Table) else list(batch)
    out = []
    for row in rows:
        err = str(row.get(_RAY_ERROR) or "")
        clean = {k: v for k, v in row.items() if k not in _ENGINE_COLUMNS or k == "prompt"}
        clean[TEXT_COLUMN] = None if err else str(row.get(TEXT_COLUMN) or row.get("generated_text") or "")
        clean[ERROR_COLUMN] = json.dumps({"kind": ENGINE_ERROR, "message": err[:500]}) if err else None
        clean[ATTEMPTS_COLUMN] = 1
        out.append(clean)
    return out


def build_vllm_processor(cfg: VLLMConfig, resources: ResourcesConfig | None = None) -> Any:
    """An unstarted ``ray.data.llm`` Processor: ``processor(ds)`` adds the ``vlm_text`` column."""
    from ray.data.llm import build_processor

    return build_processor(build_vllm_processor_config(cfg, resources),
                           preprocess=lambda row: vllm_preprocess(row, cfg),
                           postprocess=_postprocess)
