"""The generative zoo entries on a tiny random-weight ADM-style UNet (diffusers, no hub access):
seeded noise, the hooked block, the timestep, converted-checkpoint folders and the refusals."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch
from PIL import Image

from actors.feature_extractor import FeatureExtractorActor
from relate.zoo import ExtractorConfig, MissingCheckpointError, create_extractor, zoo_entry, zoo_names
from relate.zoo import generative
from relate.zoo.generative import ADM_256_UNCOND, adm_blocks

# test_adm_unet's blocks in ADM order and their channel counts (block_out_channels (32, 64)).
BLOCKS = ["conv_in", "down_blocks.0.resnets.0", "down_blocks.0.downsamplers.0", "down_blocks.1.attentions.0",
          "mid_block", "up_blocks.0.attentions.0", "up_blocks.0.upsamplers.0", "up_blocks.1.resnets.0",
          "up_blocks.1.resnets.1"]
WIDTHS = [32, 32, 32, 64, 64, 64, 64, 32, 32]


def images(n: int = 3, seed: int = 0) -> list[Image.Image]:
    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, (40 + 7 * i, 56, 3), dtype=np.uint8)) for i in range(n)]


def tiny(seed: int = 0, **kw) -> generative.DiffusionUNetExtractor:
    return create_extractor(ExtractorConfig(name="test_adm_unet", pretrained=False, seed=seed, **kw))


@pytest.fixture(scope="module")
def ex() -> generative.DiffusionUNetExtractor:
    return tiny(seed=3, batch_size=2)


def test_blocks_follow_guided_diffusions_numbering(ex):
    assert ex.block_names == BLOCKS
    with torch.device("meta"):  # the release architecture, without allocating its 553M weights
        from diffusers import UNet2DModel

        adm = UNet2DModel(**ADM_256_UNCOND)
    blocks = adm_blocks(adm)
    assert len(blocks) == 18 + 1 + 18  # input_blocks, middle_block, output_blocks of ADM-256
    assert blocks[24][0] == "up_blocks.1.upsamplers.0"
    assert round(sum(p.numel() for p in adm.parameters()) / 1e6) == 553
    e = zoo_entry("guided_diffusion")
    assert (e.options["block"], e.options["timestep"], e.library) == (24, 90, "diffusers")


def test_the_hook_reads_the_named_block(ex):
    ims = images()
    sweep = ex.encode_layers(ims, list(range(len(BLOCKS))))
    assert [sweep[f"block{i}"].shape for i in range(len(BLOCKS))] == [(3, w) for w in WIDTHS]
    assert not np.allclose(sweep["block5"], sweep["block6"])
    np.testing.assert_array_equal(ex.encode(ims), sweep["block5"])  # the entry's own block
    assert sorted(ex.encode_layers(ims, [-1, 0])) == ["block0", "block8"]
    with pytest.raises(ValueError, match="out of range"):
        ex.encode_layers(ims, [9])

    # An independent forward to the mid block, noising by hand with ADM's linear schedule.
    x = ex.to_tensor(ims)
    t = 90
    abar = np.cumprod(1 - np.linspace(1e-4, 0.02, 1000, dtype=np.float64))[t]
    xt = float(np.sqrt(abar)) * x + float(np.sqrt(1 - abar)) * ex.noise
    u = ex.unet
    with torch.no_grad():
        tt = torch.full((3,), t)
        emb = u.time_embedding(u.time_proj(tt))
        h = u.conv_in(xt)
        np.testing.assert_allclose(sweep["block0"], h.mean(dim=(2, 3)).numpy(), atol=1e-5)
        for d in u.down_blocks:
            h, _ = d(hidden_states=h, temb=emb)
        h = u.mid_block(h, emb)
    np.testing.assert_allclose(sweep["block4"], h.mean(dim=(2, 3)).numpy(), atol=1e-4)


def test_noise_is_seeded_and_the_feature_is_deterministic(ex):
    ims = images()
    a = ex.encode(ims)
    np.testing.assert_array_equal(a, ex.encode(ims))
    # Per image, whatever shares its batch (the probe caches features by image content).
    np.testing.assert_allclose(ex.encode(ims[2:]), a[2:], atol=1e-5)
    same = tiny(seed=3)
    np.testing.assert_allclose(same.encode(ims), a, atol=1e-5)
    other = tiny(seed=3)
    other.noise = torch.randn(other.noise.shape, generator=torch.Generator().manual_seed(4))
    assert not np.allclose(other.encode(ims), a, atol=1e-3)  # same weights, other noise


def test_the_timestep_changes_the_feature(ex):
    ims = images(2)
    sweep = ex.encode_timesteps(ims, [10, 90, 500])
    assert sorted(sweep) == ["t10", "t500", "t90"]
    np.testing.assert_allclose(sweep["t90"], ex.encode(ims), atol=1e-5)
    assert not np.allclose(sweep["t10"], sweep["t90"]) and not np.allclose(sweep["t90"], sweep["t500"])
    both = ex.encode_timesteps(ims, [90, 500], layers=[2, 5])
    assert sorted(both) == ["t500/block2", "t500/block5", "t90/block2", "t90/block5"]
    np.testing.assert_allclose(both["t500/block5"], sweep["t500"], atol=1e-5)
    with pytest.raises(ValueError, match=r"in \[0, 1000\)"):
        ex.encode_timesteps(ims, [1000])


def test_a_converted_checkpoint_folder_loads(ex, tmp_path):
    ex.unet.save_pretrained(tmp_path / "unet")  # config.json + diffusion_pytorch_model.safetensors
    ims = images(2)
    want = ex.encode(ims)
    for ckpt in (tmp_path / "unet", tmp_path / "unet" / "diffusion_pytorch_model.safetensors"):
        got = create_extractor(ExtractorConfig(name="test_adm_unet", checkpoint=str(ckpt), seed=3))
        np.testing.assert_allclose(got.encode(ims), want, atol=1e-5)
        assert got.preprocess.source.startswith(str(tmp_path / "unet" / "config.json"))
    actor = FeatureExtractorActor({"name": "test_adm_unet", "checkpoint": str(tmp_path / "unet"), "seed": 3})
    feats = actor({"image": [np.asarray(im) for im in ims]})["feature"]
    np.testing.assert_allclose(feats, want, atol=1e-5)
    (tmp_path / "unet" / "config.json").unlink()
    with pytest.raises(MissingCheckpointError, match=r"lacks \[.*config.json'\]"):
        create_extractor(ExtractorConfig(name="test_adm_unet", checkpoint=str(tmp_path / "unet")))


def test_refusals_name_the_files_they_need():
    with pytest.raises(MissingCheckpointError,
                       match=r"config.json \+ diffusion_pytorch_model.safetensors, converted from 256x256_diffusion_uncond.pt"):
        create_extractor(ExtractorConfig(name="guided_diffusion"))
    with pytest.raises(MissingCheckpointError, match="deepmind/bigbigan-resnet50/1.*'avepool_feat'"):
        create_extractor(ExtractorConfig(name="bigbigan"))
    with pytest.raises(MissingCheckpointError, match="deepmind/bigbigan-resnet50/1"):
        create_extractor(ExtractorConfig(name="bigbigan", pretrained=False))


def test_no_zoo_entry_raises_not_implemented():
    # Every generative (and adapter) entry builds from a checkpoint or refuses naming the file.
    for name in zoo_names():
        e = zoo_entry(name)
        if e.paradigm != "generative" and e.library != "adapter" or name.startswith("test_"):
            continue
        with pytest.raises(MissingCheckpointError, match=r"\.pt|\.safetensors|deepmind/bigbigan"):
            create_extractor(ExtractorConfig(name=name))
    assert "NotImplementedError" not in inspect.getsource(generative)


def test_the_probe_job_reads_the_entry_and_its_block_sweep(tmp_path):
    from eval_jobs.triplet_probe import ProbeModelConfig, probe_model
    from relate.data.poporo import read_triplet_manifest
    from relate.data.synthetic_triplets import SyntheticTripletsConfig, write_synthetic_triplets

    manifest = write_synthetic_triplets(tmp_path / "syn", SyntheticTripletsConfig(n_triplets=4, image_size=32))
    spec = ProbeModelConfig(name="test_adm_unet", pretrained=False, seed=3, layers=[4, -1])
    out = probe_model(spec, read_triplet_manifest(manifest), str(tmp_path / "cache"), batch_size=4)
    assert out["dim"] == 64 and out["entry"]["library"] == "diffusers"
    assert sorted(out["correct"]) == ["block4", "block8", "final"] and len(out["correct"]["final"]) == 4


def test_the_probe_job_sweeps_timesteps_of_a_diffusion_entry_and_refuses_them_elsewhere(tmp_path):
    from eval_jobs.triplet_probe import ProbeModelConfig, probe_model
    from relate.data.poporo import read_triplet_manifest
    from relate.data.synthetic_triplets import SyntheticTripletsConfig, write_synthetic_triplets

    manifest = read_triplet_manifest(write_synthetic_triplets(tmp_path / "syn", SyntheticTripletsConfig(
        n_triplets=4, image_size=32)))
    spec = ProbeModelConfig(name="test_adm_unet", pretrained=False, seed=3, timesteps=[10, 500])
    out = probe_model(spec, manifest, str(tmp_path / "cache"), batch_size=4)
    assert sorted(out["correct"]) == ["final", "t10", "t500"] and len(out["correct"]["t500"]) == 4
    again = probe_model(spec, manifest, str(tmp_path / "cache"), batch_size=4)  # every t read from the cache
    assert again["n_extracted"] == 0 and again["correct"] == out["correct"]
    with pytest.raises(ValueError, match="timesteps is a diffusion option"):
        probe_model(ProbeModelConfig(name="test_vit", pretrained=False, timesteps=[10]), manifest,
                    str(tmp_path / "cache2"), batch_size=4)


def test_the_converter_matches_guided_diffusions_own_unet(tmp_path):
    # Outside reference: openai/guided-diffusion's UNetModel (not on PyPI; put its source on
    # PYTHONPATH to run this). Every parameter random, ADM-256's flags, 3 levels and 4 heads.
    script_util = pytest.importorskip("guided_diffusion.script_util")
    from relate.zoo.adm_checkpoint import convert_adm_checkpoint

    torch.manual_seed(0)
    gd = script_util.create_model(
        image_size=32, num_channels=32, num_res_blocks=2, channel_mult="1,2,2", attention_resolutions="16,8",
        num_head_channels=16, learn_sigma=True, use_scale_shift_norm=True, resblock_updown=True).eval()
    with torch.no_grad():
        for p in gd.parameters():  # zero_module's zeros would hide a misplaced conv
            p.normal_(0, 0.05)
    torch.save(gd.state_dict(), tmp_path / "adm.pt")
    cfg = {**ADM_256_UNCOND, "sample_size": 32, "block_out_channels": (32, 64, 64), "attention_head_dim": 16,
           "down_block_types": ("ResnetDownsampleBlock2D", "AttnDownBlock2D", "AttnDownBlock2D"),
           "up_block_types": ("AttnUpBlock2D", "AttnUpBlock2D", "ResnetUpsampleBlock2D")}
    from diffusers import UNet2DModel

    unet = UNet2DModel.from_pretrained(str(convert_adm_checkpoint(tmp_path / "adm.pt", tmp_path / "unet", cfg)))
    ours = [m for _, m in adm_blocks(unet)]
    theirs = list(gd.input_blocks) + [gd.middle_block] + list(gd.output_blocks)
    assert len(ours) == len(theirs) == 19
    got: dict[tuple[str, int], torch.Tensor] = {}
    for side, mods in (("ours", ours), ("theirs", theirs)):
        for k, m in enumerate(mods):
            m.register_forward_hook(lambda _m, _i, o, key=(side, k): got.__setitem__(key, o))
    x, t = torch.randn(2, 3, 32, 32), torch.tensor([90, 500])
    with torch.no_grad():
        torch.testing.assert_close(unet(x, t).sample, gd(x, t), atol=1e-5, rtol=1e-4)
    for k in range(19):  # block k here is block k there
        torch.testing.assert_close(got[("ours", k)], got[("theirs", k)], atol=1e-5, rtol=1e-4)


def test_the_converter_refuses_another_architecture(ex):
    from relate.zoo.adm_checkpoint import convert_adm_state_dict

    sd = {"input_blocks.0.0.weight": torch.zeros(32, 3, 3, 3), "input_blocks.0.0.bias": torch.zeros(32),
          "label_emb.weight": torch.zeros(10, 128)}
    with pytest.raises(ValueError, match=r"unused \['label_emb.weight'\] \(1\), unfilled \['conv_norm_out"):
        convert_adm_state_dict(sd, ex.unet)
