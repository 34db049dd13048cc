"""The predicate embedding bank: strings + unit matrix + encoder name, one file (seed 001, 3.3).

No learned layer touches the bank, so swapping the vocabulary is swapping this matrix; the
model scores normalised pair vectors against it (``score_against_bank``). A bank built by one
encoder must never be read against a checkpoint trained on another: ``load_bank`` checks the
checksum, and the encoder name and dimension when the caller states what it expects.

Embedding a large vocabulary is the slow part of using one (the packaged 19,291 strings take one
to two minutes through MiniLM on two cores), so ``build_bank`` keeps each bank of at least
``CACHE_MIN_STRINGS`` strings on disk, keyed by the strings and the encoder's ``fingerprint``
(the bytes of its weights: an encoder without one, e.g. random or hub-named weights, is never
cached), and reads it back the next time in any process: ``$RELATE_BANK_CACHE`` (``off``
disables it), else ``$XDG_CACHE_HOME/relate/text_banks`` or ``~/.cache/relate/text_banks``, the
``CACHE_KEEP`` most recently used kept.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

__all__ = ["TextBank", "BankError", "build_bank", "load_bank", "score_against_bank", "bank_checksum",
           "bank_cache_dir"]

_FORMAT = "relate.text_bank.v1"
CACHE_ENV = "RELATE_BANK_CACHE"
CACHE_MIN_STRINGS = 1024  # smaller banks embed in about a second; not worth a file
CACHE_KEEP = 8  # banks kept (about 30 MB each at the packaged vocabulary's size)

log = logging.getLogger(__name__)


class BankError(ValueError):
    """A bank file is missing, corrupt, or does not match what the caller expects."""


def bank_checksum(strings: Sequence[str], matrix: np.ndarray, encoder: str) -> str:
    """sha256 over encoder name, strings and the float32 matrix bytes."""
    h = hashlib.sha256()
    h.update(encoder.encode())
    h.update(b"\0")
    h.update("\n".join(strings).encode())
    h.update(b"\0")
    h.update(np.ascontiguousarray(matrix, dtype=np.float32).tobytes())
    return h.hexdigest()


@dataclass
class TextBank:
    """``strings[i]`` is embedded as ``matrix[i]`` (float32, unit rows) by ``encoder``."""

    strings: tuple[str, ...]
    matrix: np.ndarray
    encoder: str
    _index: dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.strings = tuple(self.strings)
        self.matrix = np.ascontiguousarray(self.matrix, dtype=np.float32)
        if self.matrix.ndim != 2 or self.matrix.shape[0] != len(self.strings):
            raise BankError(f"bank matrix shape {self.matrix.shape} does not fit {len(self.strings)} strings")
        self._index = {}
        for i, s in enumerate(self.strings):
            if s in self._index:
                raise BankError(f"bank string {s!r} appears twice (rows {self._index[s]} and {i})")
            self._index[s] = i
        if not np.isfinite(self.matrix).all():
            raise BankError("bank matrix has non-finite values")

    @property
    def dim(self) -> int:
        return int(self.matrix.shape[1])

    @property
    def checksum(self) -> str:
        return bank_checksum(self.strings, self.matrix, self.encoder)

    def __len__(self) -> int:
        return len(self.strings)

    def index(self, string: str) -> int:
        try:
            return self._index[string]
        except KeyError:
            raise KeyError(f"{string!r} is not in this bank of {len(self)} strings "
                           f"(encoder {self.encoder!r})") from None

    def tensor(self, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.from_numpy(self.matrix).to(device=device, dtype=dtype)

    def save(self, path: str | Path) -> Path:
        """Write atomically: a temporary file in the same folder, then ``os.replace``."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        meta = {"format": _FORMAT, "encoder": self.encoder, "dim": self.dim,
                "size": len(self), "checksum": self.checksum}
        buf = io.BytesIO()
        np.savez(buf, strings=np.asarray(self.strings, dtype=np.str_), matrix=self.matrix,
                 meta=np.asarray(json.dumps(meta)))
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        with open(tmp, "wb") as fh:
            fh.write(buf.getvalue())
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        return path


def load_bank(path: str | Path, expect_encoder: str | None = None, expect_dim: int | None = None) -> TextBank:
    """Read a bank, verify its checksum, and refuse an unexpected encoder or dimension."""
    path = Path(path)
    if not path.is_file():
        raise BankError(f"text bank file not found: {path}")
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            strings, matrix = tuple(str(s) for s in z["strings"]), z["matrix"]
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:  # a truncated file is not a zip
        raise BankError(f"{path} is not a readable text bank: {exc}") from None
    if meta.get("format") != _FORMAT:
        raise BankError(f"{path}: unknown bank format {meta.get('format')!r} (expected {_FORMAT})")
    bank = TextBank(strings=strings, matrix=matrix, encoder=meta["encoder"])
    if bank.checksum != meta["checksum"]:
        raise BankError(f"{path}: checksum mismatch (file corrupt or edited by hand)")
    if expect_encoder is not None and bank.encoder != expect_encoder:
        raise BankError(f"{path}: bank was built by encoder {bank.encoder!r} but {expect_encoder!r} "
                        "is expected; rebuild the bank with the checkpoint's encoder")
    if expect_dim is not None and bank.dim != expect_dim:
        raise BankError(f"{path}: bank dimension {bank.dim} but {expect_dim} is expected")
    return bank


def bank_cache_dir() -> Path | None:
    """Where ``build_bank`` keeps large banks (module docstring), or None when ``$RELATE_BANK_CACHE`` is ``off``."""
    raw = os.environ.get(CACHE_ENV)
    if raw is not None and raw.strip():
        return None if raw.strip().lower() in ("off", "0", "false", "no") else Path(raw.strip()).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(base).expanduser() if base else Path.home() / ".cache") / "relate" / "text_banks"


def _cache_file(encoder, items: list[str]) -> Path | None:
    if len(items) < CACHE_MIN_STRINGS:
        return None
    folder, fingerprint = bank_cache_dir(), getattr(encoder, "fingerprint", None)
    if folder is None or not fingerprint:
        return None
    key = hashlib.sha256(f"{encoder.name}\0{fingerprint}\0".encode() + "\n".join(items).encode()).hexdigest()
    return folder / f"{key[:32]}.npz"


def _cached(path: Path, encoder_name: str, items: list[str]) -> TextBank | None:
    if not path.is_file():
        return None
    try:
        bank = load_bank(path, expect_encoder=encoder_name)
    except BankError as exc:
        log.warning("text bank cache: %s; embedding again", exc)
        return None
    if bank.strings != tuple(items):
        log.warning("text bank cache: %s holds other strings; embedding again", path)
        return None
    os.utime(path)  # recently used
    return bank


def _keep(path: Path, bank: TextBank) -> None:
    try:
        bank.save(path)
        old = sorted(path.parent.glob("*.npz"), key=lambda f: f.stat().st_mtime, reverse=True)[CACHE_KEEP:]
        for f in old:
            f.unlink(missing_ok=True)
    except OSError as exc:  # a read-only or full disk costs the next run the embedding, nothing else
        log.warning("text bank cache: cannot write %s (%s)", path, exc)


def build_bank(strings: Sequence[str], encoder_name: str = "minilm", encoder=None,
               batch_size: int | None = None, cache: bool = True) -> TextBank:
    """Embed ``strings`` (trimmed, must be unique and non-empty) with a registry encoder; a bank of
    ``CACHE_MIN_STRINGS`` or more comes from the on-disk cache when an earlier call embedded the same
    strings with the same weights (module docstring; ``cache=False`` always embeds)."""
    from relate.text.encoders import load_text_encoder

    items = [str(s).strip() for s in strings]
    empty = [i for i, s in enumerate(items) if not s]
    if empty:
        raise BankError(f"build_bank: empty strings at positions {empty[:10]}")
    enc = encoder if encoder is not None else load_text_encoder(encoder_name)
    if encoder is not None and enc.name != encoder_name:
        raise BankError(f"build_bank: encoder object is {enc.name!r} but encoder_name is {encoder_name!r}")
    path = _cache_file(enc, items) if cache else None
    bank = _cached(path, enc.name, items) if path is not None else None
    if bank is None:
        bank = TextBank(strings=tuple(items), matrix=enc.encode(items, batch_size=batch_size), encoder=enc.name)
        if path is not None:
            _keep(path, bank)
    return bank


def score_against_bank(pair_vectors, bank: TextBank):
    """Cosine of each pair vector with each bank row: ``normalise(pairs) @ bank.T``, ``[P, V]``.

    Torch in, torch out (on the pair vectors' device and dtype); numpy in, numpy out. The bank
    enters only as a matrix, so a different vocabulary needs no retraining.
    """
    if isinstance(pair_vectors, torch.Tensor):
        if pair_vectors.shape[-1] != bank.dim:
            raise BankError(f"pair vectors have dim {pair_vectors.shape[-1]}, bank has {bank.dim}")
        mat = bank.tensor(pair_vectors.device, pair_vectors.dtype)
        return torch.nn.functional.normalize(pair_vectors, dim=-1) @ mat.T
    vec = np.asarray(pair_vectors, dtype=np.float32)
    if vec.shape[-1] != bank.dim:
        raise BankError(f"pair vectors have dim {vec.shape[-1]}, bank has {bank.dim}")
    vec = vec / np.maximum(np.linalg.norm(vec, axis=-1, keepdims=True), 1e-12)
    return vec @ bank.matrix.T
