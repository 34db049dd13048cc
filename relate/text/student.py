"""The distilled text student (seed 001, 3.3 and B.2.1): an adapter over frozen teacher tokens.

The student reads the frozen teacher's last-layer token outputs, so any string the teacher's
tokenizer accepts embeds (no out-of-vocabulary failure). Optional small transformer layers
refine the tokens; their masked mean is concatenated with the teacher's own mean-pooled vector
and mapped by a residual MLP (linear skip + two-layer MLP) to the student dimension (512 in the
paper). ``layers=0`` keeps only the MLP adapter, which is what a 2-core CPU run can afford. Saved as a folder
(``student.json`` + ``student.pt``) and loaded by registry name ``student:<folder>``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from relate.text.backends import HFTextEncoder, check_strings, length_sorted_batches, mean_pool

__all__ = ["TextStudent", "StudentEncoder", "create_text_student", "save_student", "load_student_encoder",
           "student_teacher_name"]

_META = "student.json"
_WEIGHTS = "student.pt"


class TextStudent(nn.Module):
    """Teacher tokens ``[B, L, Dt]`` + mask ``[B, L]`` -> unit vectors ``[B, dim]``."""

    def __init__(self, teacher_dim: int, dim: int = 512, width: int = 192, layers: int = 1, heads: int = 4,
                 hidden: int = 1024, attention_pool: bool = False):
        super().__init__()
        self.config = {"teacher_dim": teacher_dim, "dim": dim, "width": width, "layers": layers,
                       "heads": heads, "hidden": hidden, "attention_pool": attention_pool}
        pooled_dim = teacher_dim
        if attention_pool:
            # A learned score per teacher token; the softmax-weighted token average rides along the mean.
            self.score = nn.Sequential(nn.LayerNorm(teacher_dim), nn.Linear(teacher_dim, 1))
            pooled_dim += teacher_dim
        if layers > 0:
            self.norm = nn.LayerNorm(teacher_dim)
            self.down = nn.Linear(teacher_dim, width)
            layer = nn.TransformerEncoderLayer(width, heads, 2 * width, dropout=0.0, batch_first=True,
                                               norm_first=True, activation="gelu")
            self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            pooled_dim += width
        self.skip = nn.Linear(pooled_dim, dim)
        self.mlp = nn.Sequential(nn.LayerNorm(pooled_dim), nn.Linear(pooled_dim, hidden), nn.GELU(),
                                 nn.Linear(hidden, dim))

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        mask = mask.to(torch.bool)
        # The teacher's own pooled vector always rides along, so the adapter only has to learn
        # the correction (direction words) rather than re-derive the whole sentence meaning.
        pooled = mean_pool(hidden, mask)
        if self.config.get("attention_pool"):
            weights = self.score(hidden).squeeze(-1).masked_fill(~mask, float("-inf")).softmax(-1)
            pooled = torch.cat([(weights.unsqueeze(-1) * hidden).sum(1), pooled], dim=-1)
        if self.config["layers"] > 0:
            tokens = self.blocks(self.down(self.norm(hidden)), src_key_padding_mask=~mask)
            pooled = torch.cat([mean_pool(tokens, mask), pooled], dim=-1)
        return F.normalize(self.skip(pooled) + self.mlp(pooled), dim=-1)


def create_text_student(teacher_dim: int, dim: int = 512, width: int = 192, layers: int = 1,
                        heads: int = 4, hidden: int = 1024, attention_pool: bool = False) -> TextStudent:
    """``layers`` token-transformer layers (0: an MLP adapter over the pooled teacher tokens);
    ``attention_pool`` adds a learned attention-weighted average of the teacher tokens to the mean."""
    if dim < 2 or (layers > 0 and width % heads):
        raise ValueError(f"student: dim must be >= 2 and width ({width}) divisible by heads ({heads})")
    return TextStudent(teacher_dim, dim=dim, width=width, layers=layers, heads=heads, hidden=hidden,
                       attention_pool=attention_pool)


def save_student(folder: str | Path, model: TextStudent, teacher: str, extra: dict | None = None) -> Path:
    """Write ``student.json`` (teacher name + shape) and ``student.pt`` (weights), each atomically."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    meta = {"format": "relate.text_student.v1", "teacher": teacher, "model": model.config, **(extra or {})}
    tmp = folder / f".{_WEIGHTS}.tmp"
    torch.save({k: v.detach().cpu() for k, v in model.state_dict().items()}, tmp)
    os.replace(tmp, folder / _WEIGHTS)
    tmp = folder / f".{_META}.tmp"
    tmp.write_text(json.dumps(meta, indent=2))
    os.replace(tmp, folder / _META)
    return folder


def _read_meta(folder: Path) -> dict:
    if not (folder / _META).is_file() or not (folder / _WEIGHTS).is_file():
        raise ValueError(f"{folder} is not a saved text student (needs {_META} and {_WEIGHTS})")
    return json.loads((folder / _META).read_text())


def student_teacher_name(folder: str | Path) -> str:
    """The registry name of the encoder a saved student reads its tokens from."""
    return _read_meta(Path(folder))["teacher"]


class StudentEncoder:
    """A saved student behind the TextEncoder interface (batched, deterministic, unit rows).

    ``teacher`` is the loaded encoder named by ``student_teacher_name(folder)``; it is passed in
    (``relate.text.encoders`` loads it by name) rather than looked up here."""

    def __init__(self, folder: str | Path, teacher: HFTextEncoder, name: str | None = None, batch_size: int = 256):
        folder = Path(folder)
        meta = _read_meta(folder)
        self.name = name or f"student:{folder}"
        self.teacher_name = meta["teacher"]
        if not isinstance(teacher, HFTextEncoder):
            raise ValueError(f"student {folder}: teacher {self.teacher_name!r} exposes no token outputs")
        self.teacher, self.batch_size = teacher, batch_size
        self.model = create_text_student(**meta["model"]).eval()
        state = torch.load(folder / _WEIGHTS, map_location="cpu", weights_only=True)
        self.model.load_state_dict(state, strict=True)  # a missing or extra key is an error
        self.dim = int(meta["model"]["dim"])

    @torch.inference_mode()
    def encode(self, strings: Sequence[str], batch_size: int | None = None) -> np.ndarray:
        items = check_strings(strings)
        out = np.zeros((len(items), self.dim), dtype=np.float32)
        for idx in length_sorted_batches(len(items), [len(s) for s in items], batch_size or self.batch_size):
            hidden, mask = self.teacher.token_outputs([items[i] for i in idx])
            out[idx] = self.model(hidden, mask).numpy()
        return out


def load_student_encoder(folder: str | Path, teacher: HFTextEncoder, name: str | None = None) -> StudentEncoder:
    """The student saved in ``folder``, reading tokens from ``teacher``."""
    return StudentEncoder(folder, teacher, name=name)
