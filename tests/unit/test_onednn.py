"""The CPU inference forward on oneDNN's prepacked kernels (relate.model.onednn): same numbers as
the modules it replaces, the packed kernels actually used, and nothing kept stale or lost."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
import torch
from timm.layers import SwiGLU
from torch import nn

from _browser import in_ci
from relate.api import RelationPredictor
from relate.model import create_relation_model
from relate.model.config import BackboneConfig
from relate.model.onednn import PackedLinear, PackedSwiGLU, packed_weights, prepack_cpu
from tests.unit.test_model_forward_api import _batch, random_bank, tiny_cfg

# every x86 torch wheel has oneDNN: under CI its absence is a failure, not a skip
pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available() and not in_ci(),
                                reason="torch built without oneDNN (fails instead when CI is set)")


def _ops(fn) -> set[str]:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    return {e.key for e in prof.key_averages()}


def _linear(seed=0, n_in=48, n_out=80) -> tuple[nn.Linear, PackedLinear]:
    torch.manual_seed(seed)
    plain = nn.Linear(n_in, n_out)
    packed = copy.deepcopy(plain)
    packed.__class__ = PackedLinear
    assert packed.prepack(rows_hint=64)
    return plain, packed


@pytest.mark.parametrize("shape", [(7, 48), (2, 13, 48), (1, 64, 48)])
def test_packed_linear_equals_linear_and_runs_on_the_packed_kernel(shape):
    plain, packed = _linear()
    x = torch.randn(*shape)
    with torch.inference_mode():
        want = plain(x)
        got = packed(x)
        ops = _ops(lambda: packed(x))
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert "mkldnn::_linear_pointwise" in ops and "aten::addmm" not in ops, ops


def test_a_weight_changed_after_packing_is_used_not_the_stale_copy():
    plain, packed = _linear()
    x = torch.randn(5, 48)
    with torch.no_grad():
        packed(x)  # packed now
        for m in (plain, packed):
            m.weight.mul_(-2.0)
            m.bias.add_(1.0)
        torch.testing.assert_close(packed(x), plain(x), rtol=1e-5, atol=1e-5)
    packed.load_state_dict(nn.Linear(48, 80).state_dict())
    with torch.no_grad():
        torch.testing.assert_close(packed(x), torch.nn.functional.linear(x, packed.weight, packed.bias),
                                   rtol=1e-5, atol=1e-5)


def test_a_converted_linear_still_trains():
    plain, packed = _linear()
    x = torch.randn(6, 48)
    packed(x).square().sum().backward()
    plain(x).square().sum().backward()
    torch.testing.assert_close(packed.weight.grad, plain.weight.grad)
    torch.testing.assert_close(packed.bias.grad, plain.bias.grad)


def test_swiglu_fused_equals_timm_swiglu_without_separate_silu_or_multiply():
    torch.manual_seed(0)
    plain = SwiGLU(in_features=64, hidden_features=256).eval()
    fused = copy.deepcopy(plain)
    assert prepack_cpu(fused) == 1
    assert type(fused) is PackedSwiGLU and type(fused.fc2) is PackedLinear
    x = torch.randn(2, 37, 64)
    with torch.inference_mode():
        torch.testing.assert_close(fused(x), plain(x), rtol=1e-5, atol=1e-5)
        ops = _ops(lambda: fused(x))
    assert not ops & {"aten::silu", "aten::mul", "aten::addmm"}, ops
    assert "mkldnn::_linear_pointwise" in ops


def _dinov3_tiny() -> nn.Module:
    torch.manual_seed(0)
    cfg = tiny_cfg(backbone=BackboneConfig(name="vit_small_plus_patch16_dinov3", img_size=32, depth=2, embed_dim=64,
                                           num_heads=2, taps=[-2, -1], patch_size=8))
    return create_relation_model(cfg).eval()


def test_a_converted_relation_model_scores_as_before_with_the_same_state_dict():
    model = _dinov3_tiny()
    images, boxes, valid = _batch()
    bank = torch.from_numpy(random_bank(list("abcdefg")).matrix)
    with torch.inference_mode():
        want = model(images, boxes, valid, bank)
    converted = copy.deepcopy(model)
    keys = {k: v.clone() for k, v in converted.state_dict().items()}
    n = prepack_cpu(converted)
    plain_linears = [m for m in model.modules() if type(m) is nn.Linear]
    kept = {id(c) for m in converted.modules() if isinstance(m, (nn.TransformerEncoderLayer, nn.MultiheadAttention))
                  for c in m.modules()}
    kept |= {id(c) for m in converted.modules() if type(m) is PackedSwiGLU for c in (m.fc1_g, m.fc1_x)}
    left = [name for name, m in converted.named_modules() if type(m) is nn.Linear and id(m) not in kept]
    assert not left, f"linears left on the BLAS path: {left}"
    in_layers = {id(c) for m in converted.modules() if isinstance(m, (nn.TransformerEncoderLayer, nn.MultiheadAttention))
                 for c in m.modules()}
    want_packed = {id(m.weight) for m in converted.modules() if isinstance(m, nn.Linear) and id(m) not in in_layers}
    assert {id(w) for w in packed_weights(converted)} == want_packed  # what onednn_packed_mib sums
    assert any(type(m) is PackedSwiGLU for m in converted.modules()), "the DINOv3 blocks' SwiGLU was not fused"
    assert 0 < n < len(plain_linears)  # a fused SwiGLU counts once for its three linears
    assert converted.state_dict().keys() == keys.keys()
    for k, v in converted.state_dict().items():
        assert torch.equal(v, keys[k]), k
    for copy_ in (converted, copy.deepcopy(converted), pickle.loads(pickle.dumps(converted))):
        with torch.inference_mode():
            got = copy_(images, boxes, valid, bank)
        assert torch.equal(got.pairs, want.pairs)
        torch.testing.assert_close(got.scores.logits, want.scores.logits, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(got.l_pair, want.l_pair, rtol=1e-4, atol=1e-4)


def test_the_predictor_scores_on_the_packed_kernels_as_the_plain_model_does():
    model = _dinov3_tiny()
    plain = copy.deepcopy(model)
    bank = random_bank(list("abc"))
    predictor = RelationPredictor(model, bank)
    kinds = {type(m) for m in predictor.model.modules()}
    assert PackedLinear in kinds and PackedSwiGLU in kinds
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (40, 56, 3), dtype=np.uint8)
    boxes = np.array([[2, 2, 30, 30], [20, 8, 54, 38], [5, 20, 40, 39]], dtype=np.float32)
    ops = _ops(lambda: predictor.score_images([image], [boxes]))
    assert "mkldnn::_linear_pointwise" in ops and "aten::silu" not in ops, ops
    got = predictor.score_images([image], [boxes])[0]
    want = RelationPredictor(plain, bank)
    for m in want.model.modules():  # undo the conversion: the reference runs the plain modules
        if type(m) is PackedSwiGLU:
            m.__class__ = SwiGLU
        elif type(m) is PackedLinear:
            m.__class__ = nn.Linear
    ref = want.score_images([image], [boxes])[0]
    assert "mkldnn::_linear_pointwise" not in _ops(lambda: want.model.backbone(torch.rand(1, 3, 32, 32)))
    np.testing.assert_array_equal(got.pairs, ref.pairs)
    np.testing.assert_allclose(got.l_pred, ref.l_pred, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got.l_pair, ref.l_pair, rtol=1e-4, atol=1e-4)
