"""A run's matrix products and attention kernels, recorded as they dispatch and replayed alone.

What a training step could reach if nothing but its arithmetic took time is not the GEMM rate of
one large square product: a step's products have its own shapes (dim 128, a few hundred tokens,
batched small matrices) and its attention runs in fused kernels. ``record_products`` notes every
such op a run dispatches (its aten overload, every tensor argument's shape, strides and dtype,
the other arguments as given); ``replay`` makes a function that runs the same ops on fresh
tensors of those layouts back to back, ``replay_seconds`` the best of a few timed rounds of it. A
run's counted FLOPs over that time over the GEMM rate is its fraction of peak with every other op
(element-wise work, dropout's draws, copies, Python) at zero: the ceiling a step's own shapes put on
``train_fraction_of_peak``.

The ops are those that carry the FLOPs torch's flop counter counts for this model (matrix
products, convolutions) and the CPU attention kernels, whose work the counter cannot see
(``benchmarks.relation_cpu.forward_flops``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks._common import best_of

__all__ = ["PRODUCT_OPS", "Product", "record_products", "replay", "replay_seconds"]

_A = torch.ops.aten
PRODUCT_OPS = frozenset({
    _A.mm.default, _A.addmm.default, _A.bmm.default, _A.baddbmm.default,
    _A.convolution.default, _A.convolution_backward.default,
    _A._scaled_dot_product_flash_attention_for_cpu.default,
    _A._scaled_dot_product_flash_attention_for_cpu_backward.default,
})


@dataclass(frozen=True)
class _Layout:
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype

    def build(self) -> torch.Tensor:
        """A tensor of this layout over fresh memory (an expanded layout, stride 0, shares it as the
        original did)."""
        span = 0 if 0 in self.shape else 1 + sum((n - 1) * s for n, s in zip(self.shape, self.stride))
        base = torch.empty(span, dtype=self.dtype)
        base = base.normal_() if self.dtype.is_floating_point else base.zero_()
        return base.as_strided(self.shape, self.stride)


@dataclass(frozen=True)
class Product:
    """One dispatched product: the op and its arguments, tensors kept as their layouts."""

    op: Any
    args: tuple
    kwargs: dict

    def tensors(self) -> list[_Layout]:
        return [a for a in _flat(self.args) if isinstance(a, _Layout)]


def _flat(xs):
    for x in xs:
        if isinstance(x, (list, tuple)):
            yield from _flat(x)
        else:
            yield x


def _spec(x):
    if isinstance(x, torch.Tensor):
        return _Layout(tuple(x.shape), tuple(x.stride()), x.dtype)
    if isinstance(x, (list, tuple)):
        return type(x)(_spec(y) for y in x)
    return x


def _build(x):
    if isinstance(x, _Layout):
        return x.build()
    if isinstance(x, (list, tuple)):
        return type(x)(_build(y) for y in x)
    return x


class _Recorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[Product] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in PRODUCT_OPS:
            self.calls.append(Product(func, _spec(tuple(args)), {k: _spec(v) for k, v in kwargs.items()}))
        return func(*args, **kwargs)


def record_products(run: Callable[[], Any]) -> tuple[Any, list[Product]]:
    """``run()``'s result and the products it dispatched, in order (its backward's too, where ``run``
    calls it)."""
    rec = _Recorder()
    with rec:
        result = run()
    return result, rec.calls


def replay(calls: list[Product]) -> Callable[[], None]:
    """A function that runs every call in ``calls`` on fresh tensors of its layouts (built here, once;
    run once here, untimed, so the first timed call finds its kernels' state warm)."""
    if not calls:
        raise ValueError("no products to replay: the run dispatched none of PRODUCT_OPS")
    built = [(c.op, _build(c.args), _build(c.kwargs)) for c in calls]

    def once() -> None:
        for op, a, k in built:
            op(*a, **k)

    once()
    return once


def replay_seconds(calls: list[Product], repeats: int = 3) -> float:
    """Best wall time of ``repeats`` rounds of ``replay(calls)``."""
    return best_of(replay(calls), repeats)
