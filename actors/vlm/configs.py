"""Typed configs of the VLM annotator backends (one home, so the pipeline config nests them)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from relate.config import StrictConfig
from relate.data.gate_hard_cases import HardCaseConfig

__all__ = ["SamplingConfig", "ErrorRates", "ScriptedConfig", "OpenAIConfig", "TransformersConfig",
           "VLLMConfig", "VLMConfig", "ERROR_TYPES"]


class SamplingConfig(StrictConfig):
    """Decoding parameters shared by the model-backed annotators."""

    temperature: float = Field(0.0, ge=0, description="0 = greedy; annotation runs are deterministic by default.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling mass.")
    max_tokens: int = Field(1024, ge=1, description="Most new tokens per answer.")


class ErrorRates(StrictConfig):
    """Per image and pass, the probability of injecting one labelled error of each kind."""

    contact_disjoint: float = Field(0.3, ge=0, le=1, description="Spatial pass: contact predicate on disjoint boxes.")
    containment_no_overlap: float = Field(0.15, ge=0, le=1, description="Spatial pass: 'inside' on boxes that barely overlap.")
    proximity_far: float = Field(0.15, ge=0, le=1, description="Spatial pass: 'near' on far-apart boxes.")
    wrong_direction: float = Field(0.3, ge=0, le=1, description="Spatial pass: a true left/right or above/below with roles reversed (repairable).")
    not_layout: float = Field(0.2, ge=0, le=1, description="Spatial pass: a predicate outside the 21 layout forms.")
    body_part_spatial: float = Field(0.15, ge=0, le=1, description="Spatial pass: a layout relation involving a body part.")
    body_part_subject: float = Field(0.2, ge=0, le=1, description="Semantic/grow: a body part as subject of a non-part predicate.")
    body_part_object: float = Field(0.15, ge=0, le=1, description="Semantic/grow: person 'wearing' its own body part.")
    semantic_disjoint: float = Field(0.2, ge=0, le=1, description="Semantic/grow: holding/wearing on disjoint boxes.")
    person_duplicate: float = Field(1.0, ge=0, le=1, description="Any pass: a relation between two boxes of one person (needs a duplicate box).")
    bad_index: float = Field(0.1, ge=0, le=1, description="Any pass: an id outside the marker numbers.")
    repeated_pair: float = Field(0.2, ge=0, le=1, description="Grow/spatial: repeat a relation already proposed.")
    depth_flip: float = Field(0.15, ge=0, le=1, description="Spatial pass: front/behind reversed; geometry cannot see it (must pass, unchecked).")
    malformed_json: float = Field(0.03, ge=0, le=1, description="Whole output unusable (truncated or prose only).")


ERROR_TYPES: tuple[str, ...] = tuple(ErrorRates.model_fields)


class ScriptedConfig(StrictConfig):
    """The synthetic world's annotator: the true relations plus seeded, labelled errors."""

    seed: int = Field(0, description="Seed; outputs are a pure function of (seed, image_id, pass).")
    errors: ErrorRates = Field(default_factory=ErrorRates, description="Injection probability per error kind.")
    grow_share: float = Field(0.3, ge=0, le=1, description="Share of true semantic relations left for the grow pass.")
    direction_bias: float = Field(1.0, ge=0, le=1, description="Probability of stating left/right, above/below, front/behind from the left/upper/front object (the bias balancing corrects).")
    format_noise: float = Field(0.3, ge=0, le=1, description="Probability of recoverable formatting noise (prose, fences, trailing commas, string ids).")
    delay_s: float = Field(0.0, ge=0, description="Sleep per request, to emulate model latency in tests and benchmarks.")
    hard_cases: HardCaseConfig = Field(default_factory=HardCaseConfig,
                                       description="Relations on both sides of each Algorithm 1 threshold, scored per rule.")
    world: str | None = Field(None, description="The synthetic world folder the images come from: the pairs pass reads "
                              "what holds of the pairs it is asked about from the world's rules (relate.data.world_truth). "
                              "The annotation job sets it to its input_dir when the pairs pass is on.")
    pairs_recall: float = Field(1.0, ge=0, le=1, description="Pairs pass: the probability of stating each relation that "
                                "holds of an asked pair (1: all of it, as the other passes state all of their reference)")


class OpenAIConfig(StrictConfig):
    """An OpenAI-compatible chat-completions server (``vllm serve``, a ``ray.serve.llm`` app)."""

    base_url: str = Field("http://127.0.0.1:8000/v1", description="Server root ending in /v1.")
    model: str = Field("default", description="Model name the server expects.")
    api_key: str | None = Field(None, description="Bearer token; None sends no Authorization header.")
    api_key_env: str | None = Field(None, description="Environment variable holding the bearer token (e.g. "
                                                      "RELATE_API_TOKEN for a judge app behind our proxy); "
                                                      "exclusive with api_key.")
    timeout_s: float = Field(120.0, gt=0, description="Per-request timeout in seconds.")
    max_retries: int = Field(4, ge=0, description="Retries per call on timeouts, connection errors, malformed bodies, 408/429 and 5xx; a call still failing then is recorded as a failure.")
    backoff_s: float = Field(0.5, ge=0, description="First retry delay; doubles each retry (with jitter).")
    max_backoff_s: float = Field(30.0, ge=0, description="Cap on one retry delay, however many retries came before.")
    max_concurrency: int = Field(8, ge=1, description="Requests in flight at once per actor.")
    sampling: SamplingConfig = Field(default_factory=SamplingConfig, description="Decoding parameters.")

    @model_validator(mode="after")
    def _one_key(self) -> "OpenAIConfig":
        if self.api_key is not None and self.api_key_env is not None:
            raise ValueError("give api_key or api_key_env, not both")
        return self

    def bearer(self) -> str | None:
        """The token to send: inline, or read from ``api_key_env`` (which must then be set)."""
        if self.api_key_env is None:
            return self.api_key
        import os

        value = os.environ.get(self.api_key_env, "").strip()
        if not value:
            raise ValueError(f"openai.api_key_env={self.api_key_env!r} names an empty or unset environment variable")
        return value


class TransformersConfig(StrictConfig):
    """A Hugging Face image-text-to-text model from a local folder (or a hub name on clusters)."""

    model: str = Field(..., description="Local folder or hub id of an image-text-to-text model.")
    device: str = Field("cpu", description="torch device.")
    dtype: Literal["float32", "bfloat16", "float16"] = Field("float32", description="Weights dtype.")
    sampling: SamplingConfig = Field(default_factory=SamplingConfig, description="Decoding parameters.")
    batch_size: int = Field(4, ge=1, description="Requests per generate() call.")


class VLLMConfig(StrictConfig):
    """vLLM through ray.data.llm: engine, sampling, batching, concurrency and image input."""

    model_source: str = Field(..., description="Hub id or local path of the VLM served by vLLM.")
    engine_kwargs: dict[str, Any] = Field(default_factory=lambda: {"max_model_len": 8192, "limit_mm_per_prompt": {"image": 1}},
                                          description="Passed to the vLLM engine verbatim (tensor_parallel_size, max_model_len, ...).")
    sampling: SamplingConfig = Field(default_factory=SamplingConfig, description="Decoding parameters.")
    batch_size: int = Field(16, ge=1, description="Rows per engine batch.")
    concurrency: int = Field(1, ge=1, description="Engine replicas (each takes its GPUs).")
    accelerator_type: str | None = Field(None, description="Ray accelerator type to pin engines to (e.g. H100).")
    system_prompt: str | None = Field(None, description="System message before each call; None: the job's own "
                                                        "(relate/prompts/system_annotate.txt or system_judge.txt), '' sends none.")
    runtime_env: dict[str, Any] | None = Field(None, description="Ray runtime_env for the engine actors.")


class VLMConfig(StrictConfig):
    """Which backend annotates, and the settings of each (only the chosen one is used)."""

    backend: Literal["scripted", "openai", "transformers", "vllm"] = Field(
        "scripted", description="scripted (synthetic world), openai (HTTP server), transformers (local), vllm (ray.data.llm).")
    scripted: ScriptedConfig = Field(default_factory=ScriptedConfig, description="Scripted annotator settings.")
    openai: OpenAIConfig | None = Field(None, description="HTTP client settings (backend=openai).")
    transformers: TransformersConfig | None = Field(None, description="Local transformers settings (backend=transformers).")
    vllm: VLLMConfig | None = Field(None, description="vLLM processor settings (backend=vllm).")

    @model_validator(mode="after")
    def _chosen_present(self) -> "VLMConfig":
        if getattr(self, self.backend) is None:
            raise ValueError(f"backend={self.backend!r} needs a '{self.backend}' section")
        return self
