"""The feature-extractor zoo on random weights: parity with the libraries' own forward passes,
preprocessing read from the pretrained configs, local checkpoints, baselines and adapters."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from actors.feature_extractor import FeatureExtractorActor
from relate.registry import UnknownNameError
from relate.zoo import (
    ExtractorConfig, MissingCheckpointError, create_extractor, paper_model_names, zoo_entry, zoo_names,
)


def images(n: int = 3, seed: int = 0) -> list[Image.Image]:
    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, (40 + 7 * i, 56, 3), dtype=np.uint8)) for i in range(n)]


def test_zoo_covers_the_papers_twenty_models():
    names = paper_model_names()
    assert len(names) == 20 and len(set(names)) == 20
    libs = {n: zoo_entry(n).library for n in names}
    assert sum(v == "timm" for v in libs.values()) == 12
    assert sum(v == "open_clip" for v in libs.values()) == 6
    assert (libs["guided_diffusion"], libs["bigbigan"]) == ("diffusers", "adapter")
    paradigms = [zoo_entry(n).paradigm for n in names]
    assert [paradigms.count(p) for p in ("supervised", "ssl", "clip", "generative")] == [4, 7, 7, 2]
    assert {"pixels", "color_hist", "text_minilm"} <= set(zoo_names())
    with pytest.raises(UnknownNameError, match="valid names: .*sup_vit_b16"):
        zoo_entry("vit_b16_typo")


def test_every_library_entry_resolves_in_its_library():
    import open_clip
    import timm

    for name in zoo_names():
        e = zoo_entry(name)
        if e.library == "timm":
            assert timm.models.get_pretrained_cfg(e.model_id) is not None, name
        elif e.library == "open_clip":
            arch, tag = e.model_id.split("/")
            assert open_clip.get_model_config(arch) is not None, name
            assert open_clip.get_pretrained_cfg(arch, tag), name


@pytest.mark.parametrize("name,timm_id,kwargs", [
    ("test_vit", "vit_tiny_patch16_224", {"img_size": 32, "depth": 2}),
    ("test_resnet", "resnet10t", {}),
])
def test_timm_features_match_forward_features_plus_pre_logits_head(name, timm_id, kwargs):
    import timm

    ex = create_extractor(ExtractorConfig(name=name, pretrained=False, seed=5, batch_size=2))
    torch.manual_seed(5)
    ref = timm.create_model(timm_id, pretrained=False, **kwargs).eval()
    size = ex.preprocess.input_size
    x = torch.randn(3, 3, *size)
    with torch.no_grad():
        expect = ref.forward_head(ref.forward_features(x), pre_logits=True)
    assert torch.allclose(ex.forward_tensor(x), expect, atol=1e-6, rtol=0)
    # Through PIL images: the zoo's transform is timm's own eval transform for that config.
    cfg = timm.data.resolve_model_data_config(ref)
    cfg["input_size"] = (3, *size)
    tf = timm.data.create_transform(**cfg, is_training=False)
    ims = images()
    with torch.no_grad():  # same chunks of 2 as the extractor: BLAS sums depend on batch shape
        xs = torch.stack([tf(im) for im in ims])
        expect = torch.cat([ref.forward_head(ref.forward_features(xs[i:i + 2]), pre_logits=True)
                            for i in (0, 2)])
    got = ex.encode(ims)
    assert got.shape == tuple(expect.shape)
    np.testing.assert_allclose(got, expect.numpy(), atol=1e-6, rtol=0)


def test_preprocessing_comes_from_the_pretrained_config():
    import open_clip
    import timm

    ex = create_extractor("sup_resnet50")  # random weights; config of resnet50.a1_in1k
    pc = timm.models.get_pretrained_cfg("resnet50.a1_in1k")
    assert ex.preprocess.input_size == pc.input_size[1:]
    assert ex.preprocess.mean == pc.mean and ex.preprocess.std == pc.std
    assert ex.preprocess.interpolation == pc.interpolation
    assert ex.preprocess.crop.endswith(str(pc.crop_pct))
    vit = create_extractor("test_vit")
    assert vit.preprocess.mean == timm.models.get_pretrained_cfg("vit_tiny_patch16_224").mean == (0.5, 0.5, 0.5)
    clip = create_extractor("test_clip_vit")
    oc = open_clip.get_pretrained_cfg("ViT-B-32", "openai")
    assert clip.preprocess.mean == tuple(oc["mean"]) and clip.preprocess.std == tuple(oc["std"])
    assert clip.preprocess.interpolation == oc["interpolation"]


def test_open_clip_tower_matches_the_library_vision_tower():
    import open_clip
    from open_clip.model import _build_vision_tower

    ex = create_extractor(ExtractorConfig(name="test_clip_vit", pretrained=False, seed=2))
    mc = open_clip.get_model_config("ViT-B-32")
    vc = dict(mc["vision_cfg"], image_size=32, layers=2, width=64, patch_size=8, head_width=32)
    torch.manual_seed(2)
    ref = _build_vision_tower(mc["embed_dim"], vc, quick_gelu=True).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.allclose(ex.forward_tensor(x), ref(x), atol=1e-6, rtol=0)
    assert ex.encode(images(2)).shape == (2, mc["embed_dim"])


def test_local_checkpoint_loads_strictly_except_the_classifier(tmp_path):
    src = create_extractor(ExtractorConfig(name="test_resnet", pretrained=False, seed=11))
    sd = {"module." + k: v for k, v in src.model.state_dict().items() if not k.startswith("fc.")}
    sd["module.prototypes.weight"] = torch.zeros(4, 8)  # SwAV-style training head: ignored
    torch.save({"state_dict": sd}, tmp_path / "ssl.pth")  # SSL-style: wrapped, prefixed, no fc
    ex = create_extractor(ExtractorConfig(name="test_resnet", checkpoint=str(tmp_path / "ssl.pth"), seed=99))
    ims = images(2)
    np.testing.assert_allclose(ex.encode(ims), src.encode(ims), atol=1e-6)
    bad = {k: v for k, v in src.model.state_dict().items() if not k.startswith("layer4.")}
    torch.save(bad, tmp_path / "bad.pth")
    with pytest.raises(ValueError, match=r"missing \['layer4"):
        create_extractor(ExtractorConfig(name="test_resnet", checkpoint=str(tmp_path / "bad.pth")))
    with pytest.raises(MissingCheckpointError, match="not found"):
        create_extractor(ExtractorConfig(name="test_resnet", checkpoint=str(tmp_path / "none.pth")))


def test_missing_weights_name_what_is_needed():
    with pytest.raises(MissingCheckpointError, match="dino_resnet50_pretrain.pth"):
        create_extractor(ExtractorConfig(name="dino_rn50"))
    with pytest.raises(MissingCheckpointError, match="256x256_diffusion_uncond.pt"):
        create_extractor(ExtractorConfig(name="guided_diffusion"))
    with pytest.raises(MissingCheckpointError, match="bigbigan"):
        create_extractor(ExtractorConfig(name="bigbigan"))


def test_layer_sweep_taps_and_range_errors():
    ex = create_extractor("test_resnet")
    out = ex.encode_layers(images(2), [-1, 1])
    assert sorted(out) == ["block1", "block4"]
    assert out["block4"].shape == (2, 512) and out["block1"].shape[0] == 2
    with pytest.raises(ValueError, match="out of range"):
        ex.encode_layers(images(1), [7])
    with pytest.raises(NotImplementedError, match="layer sweeps"):
        create_extractor("pixels").encode_layers(images(1), [0])


def test_pixel_and_histogram_baselines():
    red = Image.new("RGB", (30, 20), (230, 10, 10))
    red_big = Image.new("RGB", (90, 90), (230, 10, 10))
    blue = Image.new("RGB", (30, 20), (10, 10, 230))
    hist = create_extractor("color_hist").encode([red, red_big, blue])
    assert hist.shape == (3, 512)
    np.testing.assert_allclose(np.linalg.norm(hist, axis=1), 1.0, atol=1e-6)  # sqrt of a distribution
    assert hist[0] @ hist[1] == pytest.approx(1.0) and hist[0] @ hist[2] == pytest.approx(0.0)
    pix = create_extractor("pixels").encode([red, blue])
    assert pix.shape == (2, 32 * 32 * 3) and pix.max() <= 1.0


def test_text_baseline_and_actor_columns(tmp_path):
    actor = FeatureExtractorActor({"name": "text_minilm"})
    out = actor({"label": np.array(["red apple", "green apple", "school bus"], dtype=object)})
    f = out["feature"]
    assert f.shape == (3, 384)
    assert f[0] @ f[1] > f[0] @ f[2]
    with pytest.raises(KeyError, match="'label' column"):
        actor({"path": np.array(["x.png"])})
    img_actor = FeatureExtractorActor(ExtractorConfig(name="color_hist"))
    ims = images(2)
    ims[0].save(tmp_path / "a.png")
    ims[1].save(tmp_path / "b.png")
    by_path = img_actor({"path": np.array([str(tmp_path / "a.png"), str(tmp_path / "b.png")])})["feature"]
    by_array = img_actor({"image": [np.asarray(im) for im in ims]})["feature"]
    np.testing.assert_allclose(by_path, by_array)
