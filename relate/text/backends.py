"""Text encoder backends: the ``TextEncoder`` interface and the Hugging Face and open_clip encoders.

The batching helpers here (string checks, length-sorted batches, mean pooling) are shared by
these backends, by the distilled student (``relate.text.student``) and by the distillation's
teacher pass; ``relate.text.encoders`` maps registry names onto all of them.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np
import torch
import torch.nn.functional as F

__all__ = ["TextEncoder", "HFTextEncoder", "OpenCLIPTextEncoder", "mean_pool", "check_strings",
           "length_sorted_batches", "files_fingerprint"]


class TextEncoder(Protocol):
    """Strings in, L2-normalised float32 rows ``[N, dim]`` out; ``name`` is its registry name."""

    name: str
    dim: int

    def encode(self, strings: Sequence[str], batch_size: int | None = None) -> np.ndarray: ...


def files_fingerprint(location: str | Path, *settings: object) -> str | None:
    """sha256 over ``settings`` and the bytes of the file or folder at ``location`` (every file under
    it, by relative name), or None when ``location`` is not on this disk (a hub name, a tag): then
    nothing fixes what the encoder computes, and ``relate.text.bank`` keeps no embedding of it."""
    root = Path(location).expanduser()
    if not root.exists():
        return None
    h = hashlib.sha256("\x1f".join(map(str, settings)).encode())
    files = sorted(f for f in root.rglob("*") if f.is_file()) if root.is_dir() else [root]
    for f in files:
        h.update(b"\x1e" + (f.relative_to(root).as_posix() if root.is_dir() else f.name).encode() + b"\x1e")
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def mean_pool(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over real tokens (padding excluded), as sentence-transformers' mean pooling."""
    w = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * w).sum(1) / w.sum(1).clamp_min(1e-9)


def check_strings(strings: Sequence[str]) -> list[str]:
    """``strings`` as a list; one bare string or a non-string item is a TypeError."""
    if isinstance(strings, str):
        raise TypeError("encode() takes a sequence of strings, not one string")
    out = list(strings)
    bad = [i for i, s in enumerate(out) if not isinstance(s, str)]
    if bad:
        raise TypeError(f"encode(): items at {bad[:5]} are not strings")
    return out


def length_sorted_batches(n_items: int, lengths: Sequence[int], batch_size: int) -> list[np.ndarray]:
    """Index arrays of at most ``batch_size`` items, shortest strings first."""
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

    @functools.cached_property
    def fingerprint(self) -> str | None:
        """What fixes the vectors: the class, pooling length and the local model folder's bytes."""
        return files_fingerprint(self.path, type(self).__name__, self.max_length)

    def _tokenize(self, strings: list[str]) -> dict[str, torch.Tensor]:
        return self.tokenizer(strings, padding=True, truncation=True, max_length=self.max_length,
                              return_tensors="pt")

    @torch.inference_mode()
    def token_outputs(self, strings: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Last hidden states ``[B, L, D]`` and attention mask ``[B, L]`` for one batch."""
        batch = self._tokenize(check_strings(strings))
        hidden = self.model(**batch).last_hidden_state
        return hidden.float(), batch["attention_mask"]

    def encode(self, strings: Sequence[str], batch_size: int | None = None) -> np.ndarray:
        items = check_strings(strings)
        out = np.zeros((len(items), self.dim), dtype=np.float32)
        lengths = [len(s) for s in items]
        for idx in length_sorted_batches(len(items), lengths, batch_size or self.batch_size):
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
        self._weights = None if tag is None else tag

    @functools.cached_property
    def fingerprint(self) -> str | None:
        """A local checkpoint file's bytes and the architecture; None for random weights or a tag."""
        if self._weights is None:
            return None
        return files_fingerprint(self._weights, type(self).__name__, self.name)

    @torch.inference_mode()
    def encode(self, strings: Sequence[str], batch_size: int | None = None) -> np.ndarray:
        items = check_strings(strings)
        chunks, order = [], []
        for idx in length_sorted_batches(len(items), [len(s) for s in items], batch_size or self.batch_size):
            tokens = self.tokenizer([items[i] for i in idx])
            chunks.append(F.normalize(self.model.encode_text(tokens).float(), dim=-1).numpy())
            order.append(idx)
        if not chunks:
            return np.zeros((0, getattr(self, "dim", 0)), dtype=np.float32)
        out = np.empty((len(items), chunks[0].shape[1]), dtype=np.float32)
        for idx, chunk in zip(order, chunks):
            out[idx] = chunk
        return out
