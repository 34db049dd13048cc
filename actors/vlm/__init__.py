"""VLM annotator backends behind one interface (:class:`VLMBackend`), chosen by config.

``scripted`` (synthetic world, labelled errors), ``openai`` (any OpenAI-compatible server),
``transformers`` (local image-text-to-text) implement ``generate``; ``vllm`` is a
``ray.data.llm`` processor stage built by :func:`actors.vlm.vllm_data.build_vllm_processor`.
"""

from __future__ import annotations

from actors.vlm.base import VLM_BACKENDS, VLMBackend, VLMRequest, create_backend
from actors.vlm.configs import (ERROR_TYPES, ErrorRates, OpenAIConfig, SamplingConfig, ScriptedConfig,
                                TransformersConfig, VLLMConfig, VLMConfig)
from actors.vlm.scripted import ScriptedAnnotator, ScriptedPlan
from actors.vlm.http import OpenAIBackend
from actors.vlm.hf import TransformersBackend

__all__ = ["VLM_BACKENDS", "VLMBackend", "VLMRequest", "create_backend", "ERROR_TYPES", "ErrorRates",
           "OpenAIConfig", "SamplingConfig", "ScriptedConfig", "TransformersConfig", "VLLMConfig", "VLMConfig",
           "ScriptedAnnotator", "ScriptedPlan", "OpenAIBackend", "TransformersBackend"]
