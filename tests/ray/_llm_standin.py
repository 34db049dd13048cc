"""Only vLLM, faked: a stand-in engine behind Ray's own ``LLMServer`` for the judge's OpenAI app.

vLLM cannot be installed here. In ``ray.serve.llm`` it is two things: the engine that answers
(``LLMServer`` builds it from ``_default_engine_cls``, Ray's injection point for tests) and the
engine config that turns ``LLMConfig`` into placement bundles (``LLMServer.get_deployment_options``
imports ``vllm`` for it). :class:`StandInServer` is Ray's ``LLMServer`` with both replaced and
nothing else: Ray's server methods, request batching, its ``OpenAiIngress`` routes and error
handling all run unchanged. The bundles are the ones vLLM's config gives for tensor parallel 1
(one ``bundle_per_worker`` per GPU with the accelerator hint, merged with the replica's own
CPU), so a config shaped like gpu.yaml's needs the same resources on the test cluster.

Selected with ``JudgeLLMConfig.server_cls = "_llm_standin:StandInServer"`` (``LLMConfig.server_cls``).
Answers are fixed strings and zeros; they only have to be valid OpenAI bodies.
"""

from __future__ import annotations

import copy
import time
from typing import Any, AsyncGenerator

from ray.llm._internal.serve.core.configs import openai_api_models as oai
from ray.llm._internal.serve.core.engine.protocol import LLMEngine
from ray.llm._internal.serve.core.server.llm_server import LLMServer, _merge_replica_actor_and_child_actor_bundles

ANSWER = '{"verdict": true}'


def _usage() -> dict:
    return {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}


class StandInEngine(LLMEngine):
    """Answers every OpenAI call the engine protocol has with a fixed, valid body."""

    def __init__(self, llm_config) -> None:
        self.model = llm_config.model_id

    async def start(self) -> None:
        return None

    def routing_stats(self) -> dict:
        return {}

    async def resolve_lora(self, lora_model) -> None:
        raise NotImplementedError("no LoRA in the stand-in engine")

    async def check_health(self) -> None:
        return None

    async def reset_prefix_cache(self) -> None:
        return None

    async def chat(self, request, raw_request_info=None) -> AsyncGenerator[Any, None]:
        yield oai.ChatCompletionResponse.model_validate({
            "id": "chatcmpl-standin", "created": int(time.time()), "model": self.model, "usage": _usage(),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": ANSWER}, "finish_reason": "stop"}]})

    async def completions(self, request, raw_request_info=None) -> AsyncGenerator[Any, None]:
        yield oai.CompletionResponse.model_validate({
            "id": "cmpl-standin", "created": int(time.time()), "model": self.model, "usage": _usage(),
            "choices": [{"index": 0, "text": ANSWER, "finish_reason": "stop"}]})

    async def embeddings(self, request, raw_request_info=None) -> AsyncGenerator[Any, None]:
        yield oai.EmbeddingResponse.model_validate({
            "model": self.model, "usage": _usage(), "data": [{"index": 0, "object": "embedding", "embedding": [0.0]}]})

    async def transcriptions(self, request, raw_request_info=None) -> AsyncGenerator[Any, None]:
        raise NotImplementedError("no audio in the stand-in engine")
        yield  # an async generator, as the protocol asks

    async def score(self, request, raw_request_info=None) -> AsyncGenerator[Any, None]:
        fields = oai.ScoreResponse.model_fields
        body = ({"model": self.model, "scores": [[0.5]]} if "scores" in fields else  # SGLang's shape
                {"model": self.model, "usage": _usage(), "data": [{"index": 0, "object": "score", "score": 0.5}]})
        yield oai.ScoreResponse.model_validate(body)

    async def tokenize(self, request, raw_request_info=None) -> AsyncGenerator[Any, None]:
        yield oai.TokenizeResponse.model_validate({"tokens": [1], "count": 1, "max_model_len": 8192})

    async def detokenize(self, request, raw_request_info=None) -> AsyncGenerator[Any, None]:
        yield oai.DetokenizeResponse.model_validate({"text": "x"})


class StandInServer(LLMServer):
    """Ray's LLMServer with the stand-in engine and vLLM's placement arithmetic (tp=1) done here."""

    _default_engine_cls = StandInEngine

    @classmethod
    def get_deployment_options(cls, llm_config) -> dict:
        opts = copy.deepcopy(llm_config.deployment_config)
        per_worker = dict((llm_config.placement_group_config or {}).get("bundle_per_worker") or {"GPU": 1})
        if llm_config.accelerator_type:
            per_worker.setdefault(f"accelerator_type:{llm_config.accelerator_type}", 0.001)
        actor = opts.get("ray_actor_options", {})
        replica = {"CPU": actor.get("num_cpus", 1), "GPU": actor.get("num_gpus", 0), **actor.get("resources", {})}
        opts["placement_group_bundles"] = _merge_replica_actor_and_child_actor_bundles([per_worker], replica)
        opts["placement_group_strategy"] = "PACK"
        return opts
