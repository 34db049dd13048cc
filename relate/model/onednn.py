"""The CPU inference forward on oneDNN's prepacked fp32 kernels (what inductor's freezing pass
emits for frozen CPU weights), without a compiler.

torch's eager CPU ``linear`` reorders its weight for the kernel on every call; a prepacked weight
is reordered once. ``prepack_cpu`` converts a model in place for inference:

* every ``nn.Linear`` becomes a ``PackedLinear``;
* every timm ``SwiGLU`` (the DINOv3 blocks' MLP) becomes a ``PackedSwiGLU``: SiLU is fused into
  the gate product and the gating multiply into the value product, so the (tokens x 1536)
  activations are written once instead of four times.

Both are subclasses that change only ``forward``: parameter names, the state dict and isinstance
checks are those of the original modules. They use the packed kernels only where those give the
same fp32 result (CPU, fp32, no autograd, not being traced or exported; a weight changed since
it was packed is packed again); anything else takes the module's own forward, so a converted
model still trains and exports. Linears inside ``nn.TransformerEncoderLayer`` /
``nn.MultiheadAttention`` stay as they are: those modules read their weights directly in their
fused inference path.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from timm.layers import SwiGLU
from torch import nn

__all__ = ["onednn_pack", "PackedLinear", "PackedSwiGLU", "prepack_cpu", "packed_weights"]


def onednn_pack(weight: torch.Tensor, rows_hint: int) -> torch.Tensor | None:
    """oneDNN's prepacked layout of an (out, in) fp32 CPU weight, or None where oneDNN is unavailable.
    ``rows_hint`` (rows per call) is only a layout hint: any number of rows works."""
    if weight.device.type != "cpu" or weight.dtype != torch.float32 or not torch.backends.mkldnn.is_available():
        return None
    try:
        return torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), rows_hint)
    except (RuntimeError, AttributeError):  # a torch built without these ops: the BLAS path stays exact
        return None


def _packed_ok(x: torch.Tensor, *params: torch.Tensor) -> bool:
    """Whether this call may use a packed copy of ``params``: plain fp32 CPU inference."""
    if torch.is_grad_enabled() and (x.requires_grad or any(p.requires_grad for p in params)):
        return False
    if x.dtype != torch.float32 or x.device.type != "cpu" or x.layout != torch.strided:
        return False
    return not (torch.jit.is_tracing() or torch.compiler.is_compiling() or torch.onnx.is_in_onnx_export())


class _Packs:
    """Packed copies of some weights, repacked when any of them changes (tracked by storage and
    tensor version; an inference-mode tensor has no version, so only its replacement is seen).
    Copies and pickles carry only the rows hint: the packed tensors are rebuilt on first use."""

    def __init__(self, rows_hint: int) -> None:
        self.rows_hint = rows_hint
        self.versions: list[tuple] | None = None
        self.packed: list[torch.Tensor | None] = []

    def for_call(self, x: torch.Tensor, weights: list[torch.Tensor]) -> list[torch.Tensor] | None:
        """The packed copies this call may use, or None: it takes the plain forward."""
        return self.current(weights) if _packed_ok(x, *weights) else None

    def current(self, weights: list[torch.Tensor]) -> list[torch.Tensor] | None:
        versions = [(w.data_ptr(), None if w.is_inference() else w._version) for w in weights]
        if versions != self.versions:
            self.versions, self.packed = versions, [onednn_pack(w, self.rows_hint) for w in weights]
        return None if any(p is None for p in self.packed) else self.packed

    def __getstate__(self) -> dict:
        return {"rows_hint": self.rows_hint, "versions": None, "packed": []}


def _flat(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(-1, x.shape[-1]).contiguous()


class PackedLinear(nn.Linear):
    """``nn.Linear`` whose inference forward runs on a oneDNN-prepacked weight."""

    _packs: _Packs | None = None

    def prepack(self, rows_hint: int) -> bool:
        self._packs = _Packs(rows_hint)
        return self._packs.current([self.weight]) is not None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        packed = self._packs.for_call(x, [self.weight]) if self._packs is not None else None
        if packed is None:
            return F.linear(x, self.weight, self.bias)
        out = torch.ops.mkldnn._linear_pointwise(_flat(x), packed[0], self.bias, "none", [None], "")
        return out.view(*x.shape[:-1], self.out_features)


class PackedSwiGLU(SwiGLU):
    """timm ``SwiGLU`` (fc2(silu(fc1_g x) * fc1_x x)) with SiLU and the gating multiply fused into
    the two input products' packed kernels."""

    _packs: _Packs | None = None

    def prepack(self, rows_hint: int) -> bool:
        self._packs = _Packs(rows_hint)
        if isinstance(self.fc2, PackedLinear):
            self.fc2.prepack(rows_hint)
        return self._packs.current([self.fc1_g.weight, self.fc1_x.weight]) is not None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        packed = self._packs.for_call(x, [self.fc1_g.weight, self.fc1_x.weight]) if self._packs is not None else None
        if packed is None:
            return super().forward(x)
        flat = _flat(x)
        gate = torch.ops.mkldnn._linear_pointwise(flat, packed[0], self.fc1_g.bias, "swish", [], "")
        hidden = torch.ops.mkldnn._linear_pointwise.binary(flat, gate, packed[1], self.fc1_x.bias, "mul")
        return self.drop2(self.fc2(self.drop1(hidden).view(*x.shape[:-1], -1)))  # norm is Identity (checked)


def _fusable_swiglu(m: nn.Module) -> bool:
    return (type(m) is SwiGLU and type(m.act) is nn.SiLU and isinstance(m.norm, nn.Identity)
            and type(m.fc1_g) is nn.Linear and type(m.fc1_x) is nn.Linear)


def prepack_cpu(model: nn.Module, rows_hint: int = 1024) -> int:
    """Convert ``model`` in place for fp32 CPU inference (see the module docstring); returns how many
    modules now run on packed kernels (0 where oneDNN is unavailable: the model is then unchanged
    in behaviour). ``rows_hint``: about how many rows (tokens, pairs) a call multiplies."""
    skip: set[int] = set()
    for m in model.modules():
        if isinstance(m, (nn.TransformerEncoderLayer, nn.MultiheadAttention)):
            skip.update(id(c) for c in m.modules() if c is not m)
    converted = 0
    for m in list(model.modules()):
        if id(m) in skip:
            continue
        if _fusable_swiglu(m):
            if type(m.fc2) is nn.Linear:
                m.fc2.__class__ = PackedLinear
            m.__class__ = PackedSwiGLU
            converted += m.prepack(rows_hint)
            skip.update((id(m.fc1_g), id(m.fc1_x), id(m.fc2)))
        elif type(m) is nn.Linear:
            m.__class__ = PackedLinear
            converted += m.prepack(rows_hint)
    return converted


def packed_weights(model: nn.Module) -> list[torch.Tensor]:
    """The weights of ``model`` that have a packed copy (each copy is about as large as its weight)."""
    out: list[torch.Tensor] = []
    for m in model.modules():
        if type(m) is PackedLinear and m._packs is not None:
            out.append(m.weight)
        elif type(m) is PackedSwiGLU and m._packs is not None:
            out += [m.fc1_g.weight, m.fc1_x.weight]
    return out
