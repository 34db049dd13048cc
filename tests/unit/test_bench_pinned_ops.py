"""``benchmarks.train_step.pinned_ms``: the profiler's names for the kernels the fixed-seed step test pins
are the names this torch gives them, and only those kernels are counted.

A name torch renamed would count nothing and the step's floor would read low without a word; a product
counted as pinned would read it high. A small training step of a dropout, GELU, layer-norm and softmax
model with fused AdamW must show every name of ``PINNED_OPS`` in its profile and count more than zero;
a step of products alone counts zero."""

from __future__ import annotations

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks.train_step import PINNED_OPS, pinned_ms


def _model_step():
    torch.manual_seed(0)
    lin, norm = torch.nn.Linear(64, 64), torch.nn.LayerNorm(64)
    opt = torch.optim.AdamW([*lin.parameters(), *norm.parameters()], lr=1e-3, fused=True)
    x = torch.randn(256, 64)

    def step() -> None:
        h = torch.nn.functional.dropout(torch.nn.functional.gelu(lin(x)), 0.1, training=True)
        loss = torch.softmax(norm(h), dim=-1).square().sum()
        opt.zero_grad()
        loss.backward()
        opt.step()

    return step


def test_every_pinned_name_is_torch_s_own():
    step = _model_step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    seen = {e.key for e in prof.key_averages()}
    missing = [op for op in PINNED_OPS if op not in seen]
    assert not missing, f"the profiler names none of {missing} in a step that runs them: {sorted(seen)}"
    assert all(ms > 0 for ms in pinned_ms(step, 2))


def test_products_are_not_counted():
    a, b = torch.randn(256, 256), torch.randn(256, 256)
    assert pinned_ms(lambda: (a @ b).relu().sum(), 2) == [0.0, 0.0]
