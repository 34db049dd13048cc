"""One interface for every VLM annotator backend, plus the registry that builds them from config.

A backend turns a batch of (marked image, prompt) requests into raw text, one string per
request; parsing and gating happen downstream, identically for every backend. The vLLM path is
different by design: on a GPU cluster it is a ``ray.data.llm`` processor stage in the dataset
graph (see :mod:`actors.vlm.vllm_data`), not an object with a ``generate`` method.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence, runtime_checkable

from relate.registry import Registry

__all__ = ["VLMRequest", "VLMOutcome", "VLMBackend", "VLM_BACKENDS", "create_backend", "PROMPT_TOKENS_COLUMN",
           "COMPLETION_TOKENS_COLUMN", "LATENCY_COLUMN", "BUSY_COLUMN"]

# per-call measurements travelling with a row from the generate step to the parse step (null: not reported)
PROMPT_TOKENS_COLUMN = "vlm_prompt_tokens"
COMPLETION_TOKENS_COLUMN = "vlm_completion_tokens"
LATENCY_COLUMN = "vlm_latency_s"  # the call's wall time
BUSY_COLUMN = "vlm_busy_s"  # the row's share of its batch's generate wall time (the stage busy, per image)


@dataclass(frozen=True)
class VLMRequest:
    """One call: the marked image (PNG bytes), the rendered prompt, and what it is about.

    ``boxes``, ``reference``, ``draft`` and ``pairs`` are context. Real backends ignore them (they
    only see pixels and text); the scripted annotator of the synthetic world reads ``reference``
    (the world's stated relations), ``draft`` (relations proposed by earlier passes) and ``pairs``
    (0-based box pairs the pairs pass asks about, also listed in the prompt).
    """

    image_png: bytes
    prompt: str
    image_id: str
    pass_name: str
    boxes: Sequence[dict] = ()
    reference: Sequence[dict] = ()
    draft: Sequence[tuple[int, str, int]] = field(default_factory=tuple)
    id_base: int = 1
    pairs: Sequence[tuple[int, int]] = ()


@dataclass(frozen=True)
class VLMOutcome:
    """How one call ended: ``text`` (an answer, possibly unusable), or a failure ``kind`` with its
    ``message``; ``attempts`` counts the requests made for it (1 + retries). ``prompt_tokens`` and
    ``completion_tokens`` are what the server reported for the answer (OpenAI ``usage``), None when
    it reported nothing; ``latency_s`` is the call's wall time, first request to outcome
    (retries and backoff included), None when the backend does not time single calls.

    Backends that can fail per request (HTTP) offer ``generate_outcomes`` returning these, so the
    pipeline records failures as data instead of mistaking them for empty answers.
    """

    text: str | None
    attempts: int = 1
    kind: str | None = None
    message: str = ""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.kind is None


@runtime_checkable
class VLMBackend(Protocol):
    """What every annotator backend provides: raw text per request, same order, never fewer."""

    def generate(self, requests: Sequence[VLMRequest]) -> list[str]:
        ...


VLM_BACKENDS: Registry[Any] = Registry("VLM backend")


def create_backend(cfg: Any) -> VLMBackend:
    """Instantiate the backend a :class:`actors.vlm.configs.VLMConfig` selects.

    Not for ``vllm``: on GPU clusters generation is a ``ray.data.llm`` processor stage
    (:func:`actors.vlm.vllm_data.build_vllm_processor`).
    """
    if cfg.backend == "vllm":
        raise ValueError("backend 'vllm' runs as a ray.data.llm processor stage; "
                         "use actors.vlm.vllm_data.build_vllm_processor instead of create_backend")
    import actors.vlm  # noqa: F401  (registers the backends)

    return VLM_BACKENDS.get(cfg.backend)(getattr(cfg, cfg.backend))
