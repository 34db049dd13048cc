"""The Serve application's one config: HTTP binding, limits, and each deployment's model and resources.

A Serve config YAML passes this model as the application's ``args``; Serve validates them
against the builder's type annotation, so an unknown key fails ``serve run`` before anything
starts. Resource settings live next to the model they size (``deployment`` in each section).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, model_validator

from actors.judge import JudgeConfig
from relate.config import StrictConfig
from relate.detector import DetectorConfig
from relate.model.config import RelationModelConfig
from relate.placement import ResourcesConfig, serve_actor_options
from serve_apps.auth import is_loopback

__all__ = ["AutoscalingOptions", "DeploymentOptions", "HttpSettings", "SecuritySettings", "RandomModelSettings",
           "LATEST", "RelationSettings", "DetectorSettings", "JudgeSettings", "ServeAppConfig"]



class AutoscalingOptions(StrictConfig):
    """Serve autoscaling: replicas follow the number of ongoing requests per replica."""

    min_replicas: int = Field(1, ge=0, description="replicas kept when idle (>=1 keeps the model warm)")
    initial_replicas: int | None = Field(None, ge=0, description="replicas at deploy time (None: min_replicas)")
    max_replicas: int = Field(2, ge=1, description="upper bound (GPUs available / num_gpus per replica)")
    target_ongoing_requests: float = Field(2.0, gt=0, description="requests in flight per replica the scaler aims at")
    upscale_delay_s: float = Field(10.0, ge=0, description="sustained overload before adding a replica")
    downscale_delay_s: float = Field(300.0, ge=0, description="sustained idleness before removing one (model load is slow)")

    @model_validator(mode="after")
    def _bounds(self) -> "AutoscalingOptions":
        if self.max_replicas < self.min_replicas:
            raise ValueError(f"max_replicas ({self.max_replicas}) < min_replicas ({self.min_replicas})")
        return self


class DeploymentOptions(StrictConfig):
    """Replicas, concurrency, resources and health checks of one deployment."""

    num_replicas: int = Field(1, ge=1, description="fixed replica count (ignored when autoscaling is set)")
    autoscaling: AutoscalingOptions | None = Field(None, description="autoscaling instead of a fixed count")
    max_ongoing_requests: int = Field(16, ge=1, description="requests a replica accepts at once (>= max_batch_size to fill batches)")
    max_queued_requests: int = Field(32, ge=1, description="requests queued in callers before 503 + Retry-After "
                                     "(bounded: an unbounded queue turns overload into unbounded latency)")
    retry_after_s: float = Field(1.0, ge=0, description="Retry-After (seconds, rounded up) sent with a queue-full 503")
    num_cpus: float = Field(0.5, ge=0, description="CPUs reserved per replica (fractions share a small machine)")
    num_gpus: float = Field(0.0, ge=0, description="GPUs per replica; fractions pack several models on one GPU")
    resources: dict[str, float] = Field(default_factory=dict, description="custom Ray resources per replica (e.g. "
                                        "{'server': 0.25}); they pin the replica to the node group that advertises "
                                        "them (cluster/*.yaml); each quantity > 0, whole above 1")
    health_check_period_s: float = Field(10.0, gt=0, description="seconds between the controller's health checks")
    health_check_timeout_s: float = Field(30.0, gt=0, description="a check slower than this marks the replica unhealthy")
    graceful_shutdown_timeout_s: float = Field(20.0, ge=0, description="time to drain in-flight requests on shutdown")

    def replica_resources(self) -> ResourcesConfig:
        """One replica's reservation as a placement request (checked by Ray's quantity rules)."""
        return ResourcesConfig(num_cpus=self.num_cpus, num_gpus=self.num_gpus, resources=self.resources)

    @model_validator(mode="after")
    def _placeable(self) -> "DeploymentOptions":
        self.replica_resources()  # e.g. num_gpus=1.5 fails here, at config time, not at deploy time
        return self

    def serve_options(self) -> dict[str, Any]:
        """Keyword arguments for ``Deployment.options``."""
        opts: dict[str, Any] = {
            "max_ongoing_requests": self.max_ongoing_requests, "max_queued_requests": self.max_queued_requests,
            "backpressure_config": {"status_code": 503, "retry_after_s": self.retry_after_s},
            "ray_actor_options": serve_actor_options(self.replica_resources()),
            "health_check_period_s": self.health_check_period_s, "health_check_timeout_s": self.health_check_timeout_s,
            "graceful_shutdown_timeout_s": self.graceful_shutdown_timeout_s}
        if self.autoscaling is not None:
            opts["autoscaling_config"] = self.autoscaling.model_dump(exclude_none=True)
            opts["num_replicas"] = "auto"
        else:
            opts["num_replicas"] = self.num_replicas
        return opts


class HttpSettings(StrictConfig):
    """Where ``scripts/serve_demo.py`` and the tests bind Serve's HTTP proxy (YAMLs use http_options).

    The ingress checks the proxy's real bind address (``http_options.host``, read from the
    Serve controller), not this field, so a YAML cannot open a public port by disagreeing here."""

    host: str = Field("127.0.0.1", description="bind address; loopback unless allow_public is set")
    port: int = Field(8000, ge=0, le=65535, description="TCP port (0 is not allowed by Serve; tests pick a free one)")
    allow_public: bool = Field(False, description="permit a non-loopback host (a bearer token is then required)")

    @model_validator(mode="after")
    def _loopback(self) -> "HttpSettings":
        if not is_loopback(self.host) and not self.allow_public:
            raise ValueError(f"http.host={self.host!r} exposes the server beyond this machine; "
                             "set http.allow_public=true to mean it")
        return self


_MODEL_CALLS_PER_REQUEST = 2  # /v1/graph: detector, then relation model (the most any route makes in turn)


class SecuritySettings(StrictConfig):
    """Request limits and authentication enforced by the ingress before any model runs."""

    bearer_token: SecretStr | None = Field(None, description="if set, every request needs 'Authorization: Bearer <token>' "
                                                             "(prefer bearer_token_env or bearer_token_file)")
    bearer_token_env: str | None = Field(None, description="name of an environment variable holding the token (kept out of YAML)")
    bearer_token_file: str | None = Field(None, description="file holding the token (e.g. a Kubernetes secret mount)")
    allowed_hosts: list[str] = Field(default_factory=list, description="without a token, Host names answered besides "
                                     "127.0.0.1, localhost, ::1 and the bind address (others get 421: a browser page "
                                     "cannot reach the API through a DNS name pointed at loopback); unused with a token")
    max_request_bytes: int = Field(16 * 2**20, gt=0, description="largest request body accepted (413 beyond)")
    body_timeout_s: float = Field(30.0, gt=0, description="a request body not fully received in this time gets 408")
    model_timeout_s: float = Field(120.0, gt=0, description="a model call slower than this gets 504 (the request is dropped)")
    max_image_pixels: int = Field(25_000_000, gt=0, description="largest width*height decoded; checked from the header before decoding")
    max_image_side: int = Field(8192, gt=0, description="largest width or height accepted")
    max_regions: int = Field(200, ge=2, description="most regions per request")
    max_mask_pixels: int = Field(64_000_000, gt=0, description="most mask pixels per request (masks x height x width), "
                                                               "checked from the run-length header before expanding")
    max_vocabulary: int = Field(1024, ge=1, description="most predicate strings per request")
    max_string_chars: int = Field(80, ge=1, description="longest predicate or query string")
    max_relations_judged: int = Field(64, ge=1, description="most relations per judge request")
    max_render_triplets: int = Field(256, ge=1, description="most edges drawn by one render request")
    max_concurrent_renders: int = Field(2, ge=1, description="renders an ingress replica draws at once, in its own "
                                        "thread pool (a render beyond gets 503 + Retry-After; one past model_timeout_s "
                                        "gets 504 and keeps its slot until it ends)")
    max_topk: int = Field(1000, ge=1, description="largest top-k a request may ask for")
    max_inflight_requests: int = Field(64, ge=1, description="model requests (POST /v1/...) an ingress replica holds "
                                       "at once, from their headers to their answer; one more gets 503 + Retry-After "
                                       "from its headers alone, before a byte of its body is read")
    max_inflight_pixels: int = Field(100_000_000, gt=0, description="image plus mask pixels (masks x width x height) "
                                     "an ingress replica holds at once, decoded or in model calls; read from each "
                                     "image's header before decoding: a request past the budget gets 503 + "
                                     "Retry-After, one larger than the whole budget 413")

    def proxy_timeout_floor_s(self) -> float:
        """The shortest proxy ``request_timeout_s`` under which every error is still this API's JSON.

        The slowest request waits for its body and then for two model calls in turn (/v1/graph: the
        detector, then the relation model), each bounded here; a proxy that gives up first answers
        with Serve's own plain-text 408 instead of the app's JSON 408 or 504."""
        return self.body_timeout_s + _MODEL_CALLS_PER_REQUEST * self.model_timeout_s

    def check_proxy_timeout(self, request_timeout_s: float | None) -> None:
        """Refuse a proxy ``request_timeout_s`` (``http_options``) at or below :meth:`proxy_timeout_floor_s`."""
        floor = self.proxy_timeout_floor_s()
        if request_timeout_s is not None and request_timeout_s <= floor:
            raise ValueError(
                f"http_options.request_timeout_s={request_timeout_s:g} must exceed security.body_timeout_s + "
                f"{_MODEL_CALLS_PER_REQUEST} x security.model_timeout_s = {floor:g} s, so the app answers a slow "
                "request with its own JSON error before the proxy cuts it off with plain text")

    @model_validator(mode="after")
    def _one_token_source(self) -> "SecuritySettings":
        given = [n for n in ("bearer_token", "bearer_token_env", "bearer_token_file") if getattr(self, n) is not None]
        if len(given) > 1:
            raise ValueError(f"give one token source, not {' and '.join(given)}")
        return self


class RandomModelSettings(StrictConfig):
    """Random weights for smoke runs without a trained checkpoint (scores are meaningless)."""

    model: RelationModelConfig = Field(default_factory=RelationModelConfig, description="architecture to instantiate")
    vocabulary: list[str] | None = Field(None, description="default vocabulary (None: the synthetic world's surface forms)")
    text_encoder: str = Field("minilm", description="text encoder registry name used to embed the vocabulary")
    seed: int = Field(0, description="torch seed, so every replica builds identical weights")


LATEST = "latest"  # RelationSettings.checkpoint: the newest trained checkpoint under latest_root


class RelationSettings(StrictConfig):
    """The relation model deployment."""

    checkpoint: str | None = Field(None, description="checkpoint folder written by train_jobs.train_relation, or "
                                   f"{LATEST!r}: the newest checkpoint under latest_root, chosen when the app is built")
    latest_root: str = Field("runs", description=f"where checkpoint {LATEST!r} looks (relative to the directory "
                             "'serve run' starts in)")
    random: RandomModelSettings | None = Field(None, description="random weights, only when asked for here by name "
                                               "(scores are meaningless; serve_apps/configs/local_random.yaml)")
    banks: dict[str, list[str]] = Field(default_factory=dict, description="named vocabularies a request may select "
                                        "by name ('default' is always the checkpoint's own bank)")
    bank_cache_size: int = Field(16, ge=1, description="per-request vocabularies kept embedded, by content hash (LRU)")
    max_pending_embeddings: int = Field(2, ge=1, description="new request vocabularies a replica embeds at once, each "
                                        "in its own thread outside the shared batch (so it delays nobody's batch); "
                                        "one more gets 503 + Retry-After; the same vocabulary twice is embedded once")
    max_batch_size: int = Field(8, ge=1, description="serve.batch: most requests scored in one forward")
    batch_wait_timeout_s: float = Field(0.01, ge=0, description="serve.batch: wait for a batch to fill")
    default_topk: int = Field(50, ge=1, description="triplets returned when the request gives no top-k")
    device: str = Field("cpu", description="torch device")
    runtime: Literal["torch", "onnxruntime", "openvino"] = Field(
        "torch", description="forward runtime; 'onnxruntime' runs the graph 'relate export --format onnx' wrote, "
        "'openvino' the IR 'relate export --format openvino' wrote (both boxes only)")
    onnx_path: str | None = Field(None, description="exported graph for runtime onnxruntime (default: "
                                                    "<checkpoint>/relation.onnx)")
    ir_path: str | None = Field(None, description="OpenVINO IR for runtime openvino (default: "
                                                  "<checkpoint>/relation.xml)")
    torch_threads: int | None = Field(None, ge=1, description="torch intra-op threads in the replica (Ray sets "
                                                             "OMP threads from num_cpus, which is too few for fractions)")
    deployment: DeploymentOptions = Field(default_factory=DeploymentOptions, description="replicas and resources")

    @model_validator(mode="after")
    def _source(self) -> "RelationSettings":
        if (self.checkpoint is None) == (self.random is None):
            raise ValueError("relation needs exactly one of 'checkpoint' (a trained folder) or 'random' (smoke runs)")
        if self.runtime != "torch" and self.checkpoint is None:
            raise ValueError(f"runtime {self.runtime!r} needs a checkpoint exported with relate export")
        if "default" in self.banks:
            raise ValueError("bank name 'default' is reserved for the checkpoint's own vocabulary")
        return self

    def resolved(self) -> "RelationSettings":
        """These settings with checkpoint ``latest`` replaced by the newest checkpoint folder under
        ``latest_root`` (an absolute path, so every replica loads the same one); refused in one line
        that says how to make a checkpoint, or to ask for random weights, when there is none."""
        if self.checkpoint != LATEST:
            return self
        from relate.checkpoint import find_latest_checkpoint

        root = Path(self.latest_root).resolve()
        found = find_latest_checkpoint(root) if root.is_dir() else None
        if found is None:
            raise ValueError(f"relation.checkpoint is {LATEST!r} but {root} holds no trained checkpoint: make one with "
                             "`make demo` (or python -m train_jobs.train_relation), or serve random weights by name "
                             "with `serve run serve_apps/configs/local_random.yaml`")
        return self.model_copy(update={"checkpoint": str(found)})

    def weights_label(self) -> str:
        """What this deployment serves, in words for its start-up log line."""
        if self.checkpoint is not None:
            return f"checkpoint {self.checkpoint}"
        return f"random weights (seed {self.random.seed}, as relation.random asks; scores are meaningless)"


class DetectorSettings(StrictConfig):
    """The detector deployment."""

    detector: DetectorConfig = Field(default_factory=DetectorConfig, description="model and operating point")
    max_batch_size: int = Field(4, ge=1, description="serve.batch: most images detected in one forward "
                                                     "(requests with the same queries and operating point)")
    batch_wait_timeout_s: float = Field(0.01, ge=0, description="serve.batch: wait for a batch to fill")
    deployment: DeploymentOptions = Field(default_factory=lambda: DeploymentOptions(num_cpus=0.25),
                                          description="replicas and resources")


class JudgeSettings(StrictConfig):
    """The judge deployment (a thin client when the VLM itself is another Serve app)."""

    judge: JudgeConfig = Field(default_factory=JudgeConfig, description="backend and prompt settings")
    deployment: DeploymentOptions = Field(default_factory=lambda: DeploymentOptions(num_cpus=0.25),
                                          description="replicas and resources")


class ServeAppConfig(StrictConfig):
    """Everything ``serve_apps.app.build_app`` needs."""

    http: HttpSettings = Field(default_factory=HttpSettings, description="HTTP binding used by scripts and tests")
    security: SecuritySettings = Field(default_factory=SecuritySettings, description="limits and authentication")
    relation: RelationSettings = Field(default_factory=lambda: RelationSettings(random=RandomModelSettings()),
                                       description="relation model deployment")
    detector: DetectorSettings | None = Field(default_factory=DetectorSettings,
                                              description="detector deployment (null: none, /v1/graph answers 422)")
    judge: JudgeSettings | None = Field(default_factory=JudgeSettings,
                                        description="judge deployment (null: none, /v1/judge answers 422)")
    ingress: DeploymentOptions = Field(default_factory=lambda: DeploymentOptions(num_cpus=0.1, max_ongoing_requests=256,
                                                                                 max_queued_requests=256),
                                       description="the FastAPI ingress (decodes and validates; light)")

    @model_validator(mode="after")
    def _ingress_not_the_bottleneck(self) -> "ServeAppConfig":
        # Backpressure must come from the model's bounded queue (a JSON 503 + Retry-After) while the
        # ingress keeps room for /readyz and /healthz; an ingress that fills first makes them fail.
        rel = self.relation.deployment
        held = rel.max_ongoing_requests + rel.max_queued_requests
        if self.ingress.max_ongoing_requests <= held:
            raise ValueError(f"ingress.max_ongoing_requests ({self.ingress.max_ongoing_requests}) must exceed what one "
                             f"relation replica holds, max_ongoing_requests + max_queued_requests ({held}), so health "
                             "checks never wait behind model requests")
        return self
