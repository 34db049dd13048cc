"""Judge deployment: per-relation verdicts (``actors.judge.JudgeActor``) behind Serve.

On GPU clusters the VLM itself runs as a separate ``ray.serve.llm`` OpenAI-compatible app
(vLLM, Qwen3-VL) and this deployment is a light client of it (backend ``openai``);
:func:`build_judge_llm_app` builds that app from typed args, importing ``ray.serve.llm`` only
when called, so CPU machines never need vLLM. That app checks its own bearer token
(:mod:`serve_apps.deployments.judge_llm`) and refuses to start on a non-loopback proxy without one.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
from pydantic import Field, field_validator, model_validator
from ray import serve

from actors.judge import JudgeActor, JudgeConfig
from relate.config import StrictConfig
from relate.placement import ResourcesConfig

__all__ = ["JudgeDeployment", "JudgeLLMConfig", "build_judge_llm_app"]


@serve.deployment(name="Judge")
class JudgeDeployment:
    def __init__(self, cfg: JudgeConfig | dict[str, Any]) -> None:
        self.actor = JudgeActor(cfg)

    def info(self) -> dict:
        return {"backend": self.actor.cfg.backend}

    def check_health(self) -> None:
        if self.actor.backend is None:
            raise RuntimeError("judge backend not initialised")

    async def judge(self, image: np.ndarray, boxes: np.ndarray, relations: list[dict], corruption_share: float,
                    seed: int) -> dict:
        return await asyncio.to_thread(self.actor.judge, image, boxes, relations, corruption_share, seed)


class JudgeLLMConfig(StrictConfig):
    """The VLM judge as a ``ray.serve.llm`` OpenAI app (seed 001, D.8: Qwen3-VL-8B, 300-token answers)."""

    model_id: str = Field("qwen3-vl-8b", description="name clients send as 'model'")
    model_source: str = Field("Qwen/Qwen3-VL-8B-Instruct", description="hub id or local path of the weights")
    accelerator_type: str | None = Field(None, description="Ray accelerator type to pin replicas to (e.g. H100)")
    resources_per_worker: dict[str, float] = Field(
        default_factory=dict, description="custom Ray resources in each engine worker's placement bundle (one "
                                          "GPU each, e.g. {'server': 1}): pins the engine to the node group "
                                          "advertising them")
    min_replicas: int = Field(1, ge=0, description="autoscaling lower bound")
    max_replicas: int = Field(2, ge=1, description="autoscaling upper bound (one GPU each at tp=1)")
    target_ongoing_requests: int = Field(32, ge=1, description="requests in flight per replica the scaler aims at")
    engine_kwargs: dict[str, Any] = Field(
        default_factory=lambda: {"max_model_len": 8192, "limit_mm_per_prompt": {"image": 1},
                                 "gpu_memory_utilization": 0.85, "tensor_parallel_size": 1},
        description="passed to the vLLM engine verbatim")
    bearer_token_env: str | None = Field(
        None, description="environment variable holding the bearer token every request must carry (set on every "
                          "node; the relate app's judge client sends the same variable as its api_key_env). "
                          "Without a token source the app starts only behind a loopback-bound proxy")
    bearer_token_file: str | None = Field(None, description="file holding the token (e.g. a Kubernetes secret "
                                                            "mount), instead of bearer_token_env")
    server_cls: str | None = Field(
        None, description="ray.serve.llm server class as 'module:Class' (LLMConfig.server_cls); None: Ray's "
                          "LLMServer on vLLM")

    @model_validator(mode="after")
    def _one_token_source(self) -> "JudgeLLMConfig":
        if self.bearer_token_env is not None and self.bearer_token_file is not None:
            raise ValueError("give one token source, not bearer_token_env and bearer_token_file")
        return self

    @field_validator("resources_per_worker")
    @classmethod
    def _custom_names(cls, v: dict[str, float]) -> dict[str, float]:
        ResourcesConfig(num_gpus=1, resources=v)  # same name and quantity rules as every other request
        return v

    def worker_request(self) -> ResourcesConfig:
        """The first placement bundle ray.serve.llm reserves: one engine worker's GPU and
        ``resources_per_worker`` plus the replica actor's own CPU (Ray merges the two, see
        ``ray.llm._internal.serve.core.server.llm_server._merge_replica_actor_and_child_actor_bundles``)."""
        return ResourcesConfig(num_cpus=1, num_gpus=1, resources=self.resources_per_worker,
                               accelerator_type=self.accelerator_type)


def build_judge_llm_app(args: JudgeLLMConfig):
    """An unstarted OpenAI-compatible Serve app hosting the judge VLM with vLLM (GPU clusters only),
    behind its own bearer-token check."""
    from ray.serve.llm import LLMConfig  # lazy: pulls in vLLM

    from serve_apps.deployments.judge_llm import build_guarded_openai_app

    cfg = JudgeLLMConfig.model_validate(args) if isinstance(args, dict) else args
    llm = LLMConfig(
        model_loading_config={"model_id": cfg.model_id, "model_source": cfg.model_source},
        accelerator_type=cfg.accelerator_type,
        # bundle_per_worker is replicated per tensor/pipeline-parallel worker; GPU must be explicit there
        placement_group_config=({"bundle_per_worker": {"GPU": 1, **cfg.resources_per_worker}}
                                if cfg.resources_per_worker else None),
        deployment_config={"autoscaling_config": {"min_replicas": cfg.min_replicas, "max_replicas": cfg.max_replicas,
                                                  "target_ongoing_requests": cfg.target_ongoing_requests}},
        engine_kwargs=cfg.engine_kwargs, server_cls=cfg.server_cls)
    return build_guarded_openai_app(llm, cfg.bearer_token_env, cfg.bearer_token_file)
