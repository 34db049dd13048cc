"""benchmarks.relation_cpu.forward_flops against hand-worked counts (2 FLOPs per multiply-add) for
the two fused CPU kernels torch's flop counter cannot see into: SDPA (pytorch/pytorch#195460) and
the encoder layer's inference fast path."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from benchmarks.relation_cpu import forward_flops


def _ops(fn) -> set[str]:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return {e.key for e in prof.key_averages()}


def test_cpu_attention_is_counted_as_its_two_products():
    b, h, n, s, d = 2, 3, 10, 14, 8  # cross-attention: 10 queries over 14 keys
    q, k, v = torch.randn(b, h, n, d), torch.randn(b, h, s, d), torch.randn(b, h, s, d)
    run = lambda: F.scaled_dot_product_attention(q, k, v)  # noqa: E731
    assert "aten::_scaled_dot_product_flash_attention_for_cpu" in _ops(run)  # the fused kernel is what runs
    # Q K^T: (n x d) (d x s) per head; A V: (n x s) (s x d) per head
    assert forward_flops(run) == 2 * b * h * n * s * d + 2 * b * h * n * s * d


def test_the_encoder_layer_fast_path_is_counted_product_by_product():
    torch.manual_seed(0)
    bsz, seq, e, ff = 2, 9, 16, 24
    layer = nn.TransformerEncoderLayer(e, nhead=4, dim_feedforward=ff, dropout=0.0, batch_first=True).eval()
    x = torch.randn(bsz, seq, e)
    pad = torch.zeros(bsz, seq, dtype=torch.bool)
    pad[1, 6:] = True

    def run():
        with torch.inference_mode():
            return layer(x, src_key_padding_mask=pad)

    assert "aten::_transformer_encoder_layer_fwd" in _ops(run)  # inference takes the fused layer
    want = (2 * bsz * seq * e * 3 * e  # q, k, v projections
            + 2 * 2 * bsz * seq * seq * e  # Q K^T and A V over all heads (padding is masked, not skipped)
            + 2 * bsz * seq * e * e  # output projection
            + 2 * 2 * bsz * seq * e * ff)  # the two feed-forward products
    assert forward_flops(run) == want
    assert torch.backends.mha.get_fastpath_enabled()  # the switch is put back


def test_the_fast_path_switch_is_put_back_when_the_forward_raises():
    def boom():
        raise RuntimeError("forward failed")

    with pytest.raises(RuntimeError, match="forward failed"):
        forward_flops(boom)
    assert torch.backends.mha.get_fastpath_enabled()


def test_products_are_recorded_with_their_layouts_and_replayed_alone():
    """``benchmarks._products_alone``: a run's matrix products and attention kernels are noted in
    dispatch order with each tensor's shape, strides and dtype (a transposed operand stays transposed),
    its backward's too; element-wise ops are not; the replay runs them on fresh tensors of those layouts."""
    from benchmarks._products_alone import record_products, replay, replay_seconds

    a = torch.randn(6, 5)
    b = torch.randn(7, 5).t()  # (5, 7), strides (1, 5)
    q = torch.randn(2, 3, 4, 8, requires_grad=True)

    def run():
        c = torch.relu(a @ b)
        o = F.scaled_dot_product_attention(q, q, q)
        o.sum().backward()
        return c

    c, calls = record_products(run)
    names = [str(call.op) for call in calls]
    assert names == ["aten.mm.default", "aten._scaled_dot_product_flash_attention_for_cpu.default",
                     "aten._scaled_dot_product_flash_attention_for_cpu_backward.default"]
    mm = calls[0].tensors()
    assert [(t.shape, t.stride) for t in mm] == [((6, 5), (5, 1)), ((5, 7), (1, 5))]
    assert all(t.shape == (2, 3, 4, 8) for t in calls[1].tensors()[:3])
    assert torch.equal(c, torch.relu(a @ b))  # the run's own result, computed as without the recorder
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        replay(calls)()  # the ops themselves run again, on tensors of the recorded shapes
    seen = [e.key for e in prof.key_averages()]
    assert "aten::mm" in seen and "aten::_scaled_dot_product_flash_attention_for_cpu_backward" in seen
    assert "aten::relu" not in seen
    assert replay_seconds(calls[:1], repeats=2) > 0
    with pytest.raises(ValueError, match="no products"):
        replay([])
