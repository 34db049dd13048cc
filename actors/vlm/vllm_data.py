"""vLLM on GPU clusters through ``ray.data.llm``: the engine is a Ray Data processor stage.

We do not hand-roll engine actors, batching or chat templating: ``vLLMEngineProcessorConfig``
plus ``build_processor`` provide them. This module maps our config onto theirs and our rows
(``prompt``, marked ``image_png``) onto what Ray's stages read: our preprocess (the prompt and
image stage) writes chat ``messages`` (system turn, then an image placeholder and the prompt),
the decoded image as ``multimodal_data={"image": [PIL.Image]}`` and ``sampling_params``; Ray's
chat-template stage renders the messages with the model's own template (which writes the image
token), its tokenize stage makes ``tokenized_prompt``, the engine stage hands prompt tokens and
image to vLLM, and its detokenize stage writes ``generated_text``. vLLM's own prepare-multimodal
stage is left off: it would decode the image inside vLLM's chat parser on the CPU workers, which
needs vllm installed there; decoding in our stage keeps every stage but the engine free of vllm,
so the whole processor except the engine runs (and is tested) on CPU. Engine errors stay per row
(``should_continue_on_error``); :func:`vllm_outcomes` turns them into recorded failures.
"""

from __future__ import annotations

from typing import Any

from actors.vlm.configs import VLLMConfig
from relate.placement import ResourcesConfig

__all__ = ["engine_bundle", "build_vllm_processor_config", "build_vllm_processor", "vllm_preprocess",
           "vllm_messages", "vllm_outcomes", "ENGINE_COLUMNS", "TEXT_COLUMN", "ERROR_COLUMN", "ATTEMPTS_COLUMN", "ENGINE_ERROR"]

TEXT_COLUMN = "vlm_text"
ERROR_COLUMN = "vlm_error"  # JSON {kind, message} of a failed call, null when the call answered
ATTEMPTS_COLUMN = "vlm_attempts"  # requests made for the call (1 + retries)
ENGINE_ERROR = "engine_error"
_RAY_ERROR = "__inference_error__"  # ray.data.llm's per-row error column (should_continue_on_error)
NOT_CALLED = "not called: no prompt"  # our mark for rows that skip the engine (see vllm_preprocess)
# what our preprocess and Ray's stages add to a row (vLLMOutputData's fields and the engine UDF's
# bookkeeping); dropped after the processor, on answered and failed rows alike
ENGINE_COLUMNS = ("messages", "sampling_params", "multimodal_data", "multimodal_uuids", "mm_processor_kwargs",
                  "tokenized_prompt", "tokenization_kwargs", "prompt_token_ids", "num_input_tokens",
                  "generated_tokens", "generated_text", "num_generated_tokens", "embeddings", "metrics",
                  "logprobs", "prompt_logprobs", "request_id", "batch_uuid", "time_taken_llm", "params",
                  "prompt", _RAY_ERROR)
_ENGINE_COLUMNS = ENGINE_COLUMNS


def engine_bundle(res: ResourcesConfig) -> dict[str, float]:
    """One engine's placement bundle: CPU, a GPU (fraction) and custom resources such as ``annotator``.

    ray.data.llm turns a single-GPU engine's bundle into the ``num_cpus``/``num_gpus``/``resources``
    of its ``map_batches`` stage, so a fraction packs several engines on one GPU.
    """
    if res.num_gpus == 0:
        raise ValueError("a vLLM engine needs a GPU: set num_gpus > 0 in its resources (e.g. 1, or 0.5 to pack two)")
    return {"CPU": res.num_cpus, "GPU": res.num_gpus, **res.resources}


def build_vllm_processor_config(cfg: VLLMConfig, resources: ResourcesConfig | None = None,
                                cpu_stage_num_cpus: float | None = None) -> Any:
    """The ``ray.data.llm.vLLMEngineProcessorConfig`` for ``cfg``: chat template, tokenize, engine and
    detokenize stages, per-row errors kept; vLLM's prepare-multimodal stage off (our preprocess
    decodes the image, see the module docstring).

    ``resources`` (per engine) sets the placement bundle and, unless ``cfg`` pins one already, the
    accelerator type; without it Ray's default applies (one whole GPU per engine, anywhere).
    ``cpu_stage_num_cpus`` is the CPU share of each chat-template/tokenize/detokenize actor (Ray's
    default is a whole CPU each; three passes make nine such actors).
    """
    from ray.data.llm import (ChatTemplateStageConfig, DetokenizeStageConfig, PrepareMultimodalStageConfig,
                              TokenizerStageConfig, vLLMEngineProcessorConfig)

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
        prepare_multimodal_stage=PrepareMultimodalStageConfig(enabled=False),
        chat_template_stage=ChatTemplateStageConfig(num_cpus=cpu_stage_num_cpus),
        tokenize_stage=TokenizerStageConfig(num_cpus=cpu_stage_num_cpus),
        detokenize_stage=DetokenizeStageConfig(num_cpus=cpu_stage_num_cpus),
        should_continue_on_error=True,  # a failed row keeps its error (vllm_outcomes records it), the job goes on
        **extra,
    )


def _decode_rgb(png: bytes) -> Any:
    import io

    from PIL import Image

    with Image.open(io.BytesIO(png)) as im:
        return im.convert("RGB")  # decoded now: a bad image fails this row here, not inside the engine


def vllm_messages(prompt: str, system_prompt: str | None) -> list[dict]:
    """Chat messages in the layout Hugging Face chat templates read for VLMs: an optional system turn,
    then one user turn holding an ``{"type": "image"}`` placeholder (the template writes the model's
    image token there) and the prompt text. Content is always a list of parts, which every VLM
    template accepts (some iterate over it and would drop a plain-string system message)."""
    messages = [{"role": "system", "content": [{"type": "text", "text": system_prompt}]}] if system_prompt else []
    return messages + [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt}]}]


def vllm_preprocess(row: dict, cfg: VLLMConfig, system_prompt: str | None = None) -> dict:
    """Our prompt and image stage: a row with ``prompt`` and the marked ``image_png`` gains chat
    ``messages`` (rendered by Ray's chat-template stage), ``multimodal_data`` (the decoded image, as
    vLLM's engine takes it: ``{"image": [PIL.Image]}``) and ``sampling_params``."""
    if not row.get("prompt"):  # not a call (a failed or rejected image, a pass that does not apply):
        return {_RAY_ERROR: NOT_CALLED}  # Ray's stages pass rows carrying an error by; no engine work
    s = cfg.sampling
    return dict(row,
                messages=vllm_messages(row["prompt"], system_prompt),
                multimodal_data={"image": [_decode_rgb(row["image_png"])]},
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
    (``vlm_error``), a row without a prompt a call not made (no text, no error, 0 attempts, as the
    other backends leave it), every other row an answer; engine columns are dropped either way."""
    import json

    import pyarrow as pa

    rows = batch.to_pylist() if isinstance(batch, pa.Table) else list(batch)
    out = []
    for row in rows:
        err = str(row.get(_RAY_ERROR) or "")
        clean = {k: v for k, v in row.items() if k not in _ENGINE_COLUMNS or k == "prompt"}
        if err == NOT_CALLED:
            clean[TEXT_COLUMN], clean[ERROR_COLUMN], clean[ATTEMPTS_COLUMN] = None, None, 0
            out.append(clean)
            continue
        clean[TEXT_COLUMN] = None if err else str(row.get(TEXT_COLUMN) or row.get("generated_text") or "")
        clean[ERROR_COLUMN] = json.dumps({"kind": ENGINE_ERROR, "message": err[:500]}) if err else None
        clean[ATTEMPTS_COLUMN] = 1
        out.append(clean)
    return out


def build_vllm_processor(cfg: VLLMConfig, resources: ResourcesConfig | None = None,
                         system_prompt: str | None = None, cpu_stage_num_cpus: float | None = None) -> Any:
    """An unstarted ``ray.data.llm`` Processor over rows with ``prompt`` and ``image_png``.

    ``system_prompt`` is the job's default system message; ``cfg.system_prompt`` overrides it
    ('' sends none). Answered rows come out with ``vlm_text``, failed ones with Ray's
    ``__inference_error__``: map :func:`vllm_outcomes` over the result to get one layout for both.
    """
    from ray.data.llm import build_processor

    system = system_prompt if cfg.system_prompt is None else cfg.system_prompt
    return build_processor(build_vllm_processor_config(cfg, resources, cpu_stage_num_cpus),
                           preprocess=lambda row: vllm_preprocess(row, cfg, system),
                           postprocess=_postprocess)
