"""Configuration of the A5 judge job (eval_jobs.judge): the judged systems, the judge backend and the run.

Both the driver (``eval_jobs.judge``) and the shard task (``eval_jobs.judge_shard``) validate a
``JudgeJobConfig``; it lives here so that neither module has to import the other for it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from actors.vlm.configs import OpenAIConfig, TransformersConfig, VLLMConfig
from relate.config import StrictConfig
from relate.judge import GraphArmConfig, RelationArmConfig, ScriptedJudgeConfig
from relate.placement import ResourcesConfig
from relate.storage import Location, LocationValue

__all__ = ["JudgeSystemSpec", "JudgeBackendConfig", "JudgeJobConfig"]


class JudgeSystemSpec(StrictConfig):
    name: str = Field(description="system name in the tables (no '|' or '~')")
    predictions: Location = Field(description="PREDICTIONS_SCHEMA Parquet of this system on the judged split")
    threshold: float | None = Field(None, description="deployed depth: the system's own score threshold")
    vocabulary_size: int | None = Field(None, ge=1, description="KT alphabet: size of the system's declared "
                                        "vocabulary (default: the predicates it actually uses)")

    @model_validator(mode="after")
    def _name(self) -> "JudgeSystemSpec":
        if "|" in self.name or "~" in self.name or "/" in self.name:
            raise ValueError(f"system name {self.name!r} may not contain '|', '~' or '/'")
        return self


class JudgeBackendConfig(StrictConfig):
    """Which judge answers; only the chosen section is used."""

    backend: Literal["scripted", "transformers", "openai", "vllm"] = Field(
        "scripted", description="scripted (known error rates, synthetic world), transformers (local VLM), "
                                "openai (any OpenAI-compatible server: vLLM, the ray.serve.llm Judge app), "
                                "vllm (offline, a ray.data.llm processor over all rendered calls)")
    scripted: ScriptedJudgeConfig = Field(default_factory=ScriptedJudgeConfig, description="scripted judge")
    transformers: TransformersConfig | None = Field(None, description="local transformers VLM (backend=transformers)")
    openai: OpenAIConfig | None = Field(None, description="HTTP server settings (backend=openai)")
    vllm: VLLMConfig | None = Field(None, description="ray.data.llm vLLM processor settings (backend=vllm, GPUs)")

    @model_validator(mode="after")
    def _chosen_present(self) -> "JudgeBackendConfig":
        if self.backend != "scripted" and getattr(self, self.backend) is None:
            raise ValueError(f"judge backend={self.backend!r} needs a '{self.backend}' section")
        return self


class JudgeJobConfig(StrictConfig):
    out_dir: Location = Field("runs/judge", description="run folder: config.yaml, audit/, result.json, table.md")
    corpus: Location = Field(description="corpus root (CORPUS_SCHEMA layout) holding the judged images and their annotation")
    split: str = Field("test", description="split whose images are judged")
    max_images: int | None = Field(None, ge=1, description="judge only the first N images (sorted by id)")
    reference_corpus: LocationValue | None = Field(None, description="corpus whose predicate marginal is Eq. 4's reference "
                                         "(default: the same corpus)")
    reference_split: str = Field("train", description="split of the reference corpus (the training marginal)")
    systems: list[JudgeSystemSpec] = Field(description="systems to judge (Eq. 4's vocabulary is what all emit)")
    relation: RelationArmConfig = Field(default_factory=RelationArmConfig, description="per-relation arm (A5b)")
    graph: GraphArmConfig = Field(default_factory=GraphArmConfig, description="whole-graph arm and certification")
    judge: JudgeBackendConfig = Field(default_factory=JudgeBackendConfig, description="the judge")
    id_base: int = Field(1, ge=0, description="number drawn on the first box")
    kt_min_counts: list[int] = Field(default_factory=lambda: [1, 3, 10], description="KT pooling thresholds")
    a5_requires_certification: bool = Field(True, description="expose A5 only when the graph arm certified the judge")
    images_per_shard: int = Field(8, ge=1, description="images per Ray task (and per audit file)")
    resources: ResourcesConfig = Field(default_factory=ResourcesConfig,
                                       description="what each shard task reserves (give it num_gpus for the "
                                                   "transformers judge on GPU, plus e.g. {evaluator: 1} to keep it on "
                                                   "the evaluation group); with the vllm backend, num_gpus > 0 sizes "
                                                   "each engine and the CPUs size the rendering tasks")
    use_ray: bool = Field(True, description="run shards as Ray tasks (False: in-process, for debugging)")
    max_consecutive_failures: int | None = Field(
        64, ge=1, description="stop asking the judge (JudgeStopped) once this many calls in a row failed after their "
                              "retries in one worker process: the server is down or misconfigured; the calls not made "
                              "are recorded and a rerun asks them. None: never stop. Not used by the vllm backend")

    @model_validator(mode="after")
    def _consistent(self) -> "JudgeJobConfig":
        names = [s.name for s in self.systems]
        if not names or len(set(names)) != len(names):
            raise ValueError(f"systems must be non-empty with unique names, got {names}")
        if "deployed" in self.relation.depths or (self.graph.enabled and self.graph.depth == "deployed"):
            missing = [s.name for s in self.systems if s.threshold is None]
            if missing:
                raise ValueError(f"deployed depth needs a threshold for system(s) {missing}")
        sampling = getattr(getattr(self.judge, self.judge.backend), "sampling", None)
        if self.graph.enabled and self.graph.votes > 1 and sampling is not None and sampling.temperature == 0:
            raise ValueError(f"graph.votes={self.graph.votes} with greedy decoding gives identical votes; set "
                             f"judge.{self.judge.backend}.sampling.temperature > 0 or graph.votes=1")
        if self.a5_requires_certification and not self.graph.enabled:
            raise ValueError("a5_requires_certification=True needs graph.enabled=True (the controls live there)")
        return self
