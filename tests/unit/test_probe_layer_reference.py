"""The layer sweep against outside references on tiny random-weight timm models (no hub).

thingsvision (the issue's named reference) cannot be installed next to this project: its
dependencies pin torch 2.0.1 and the project needs torch 2.14. The references here are
torchvision's graph-based ``create_feature_extractor`` (reading ``blocks.{k}`` of a ViT) and
timm's ``features_only`` wrapper (a ResNet's stages), each run on the extractor's own model and
preprocessed batch; the sweep's block-k feature must equal the reference's, pooled the same way.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from relate.zoo import create_extractor


def _images(n: int = 3, size: int = 40):
    rng = np.random.default_rng(0)
    return [Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)) for _ in range(n)]


def test_vit_block_features_equal_torchvision_feature_extractor():
    from torchvision.models.feature_extraction import create_feature_extractor

    ex = create_extractor("test_vit")  # a bare name: random weights, CPU
    ims = _images()
    ours = ex.encode_layers(ims, [0, 1])
    ref = create_feature_extractor(ex.model, return_nodes={"blocks.0": "b0", "blocks.1": "b1"}).eval()
    with torch.inference_mode():
        out = ref(ex.to_tensor(ims))
        normed = {k: ex.model.norm(out[f"b{k}"]) for k in (0, 1)}
    n_prefix = ex.model.num_prefix_tokens
    for k in (0, 1):
        tokens = out[f"b{k}"]  # [N, prefix + HW, D] as the block returns it
        np.testing.assert_allclose(ours[f"block{k}"], tokens[:, n_prefix:].mean(1).numpy(), rtol=1e-5, atol=1e-6)
        # head pooling: the class token through the final norm, as the final readout takes it
        np.testing.assert_allclose(ex.encode_layers(ims, [k], pool="head")[f"block{k}"],
                                   normed[k][:, 0].numpy(), rtol=1e-5, atol=1e-6)
    # ... so the last block under head pooling is the final pre-logits feature itself.
    np.testing.assert_allclose(ex.encode_layers(ims, [-1], pool="head")["block1"], ex.encode(ims), rtol=1e-5, atol=1e-6)


def test_resnet_stage_features_equal_timm_features_only():
    import timm

    ex = create_extractor("test_resnet")
    ims = _images(size=72)
    n = len(ex.model.feature_info)
    ours = ex.encode_layers(ims, list(range(n)))
    ref = timm.create_model(ex.entry.model_id, pretrained=False, features_only=True, out_indices=tuple(range(n)))
    ref.load_state_dict(ex.model.state_dict(), strict=False)  # same weights; the classifier is dropped
    with torch.inference_mode():
        maps = ref.eval()(ex.to_tensor(ims))
    for k, m in enumerate(maps):
        np.testing.assert_allclose(ours[f"block{k}"], m.mean(dim=(2, 3)).numpy(), rtol=1e-5, atol=1e-6)
    # a ResNet's own pooling is the global average: head pooling equals avg, and the last stage the final feature
    np.testing.assert_allclose(ex.encode_layers(ims, [n - 1], pool="head")[f"block{n - 1}"], ours[f"block{n - 1}"],
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours[f"block{n - 1}"], ex.encode(ims), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="pool"):
        ex.encode_layers(ims, [0], pool="max")


def test_open_clip_resblock_features_equal_torchvision_feature_extractor():
    from torchvision.models.feature_extraction import create_feature_extractor

    ex = create_extractor("test_clip_vit")  # open_clip's own ViT tower, shrunk, random weights
    ims = _images()
    ours = ex.encode_layers(ims, [0, -1])
    nodes = {f"transformer.resblocks.{k}": f"b{k}" for k in (0, 1)}
    with torch.inference_mode():
        out = create_feature_extractor(ex.model, return_nodes=nodes).eval()(ex.to_tensor(ims))
    for k in (0, 1):  # [N, 1 + HW, D]: the class token first, then the patch tokens the sweep averages
        np.testing.assert_allclose(ours[f"block{k}"], out[f"b{k}"][:, 1:].mean(1).numpy(), rtol=1e-5, atol=1e-6)
