"""The transformers backend on a tiny random-weight Qwen3-VL built offline from a config."""

from __future__ import annotations

import numpy as np
import pytest

from actors.vlm import SamplingConfig, TransformersBackend, TransformersConfig, VLMRequest
from relate.markers import draw_markers, encode_png
from relate.parsing import parse_relations
from relate.prompts import load_prompt, object_list


def _tiny_qwen3_vl(folder: str) -> None:
    """Char-level tokenizer with Qwen's vision tokens + a 1-layer Qwen3-VL, saved to ``folder``."""
    import tempfile

    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import (PreTrainedTokenizerFast, Qwen2VLImageProcessor, Qwen3VLConfig,
                              Qwen3VLForConditionalGeneration, Qwen3VLProcessor, Qwen3VLVideoProcessor)

    vocab = {c: i for i, c in enumerate([chr(c) for c in range(32, 127)] + ["\n", "<unk>"])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    tok.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token="<|endoftext|>", eos_token="<|im_end|>")
    fast.add_special_tokens({"additional_special_tokens": ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>",
                                                           "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]})
    fast.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['content'] is string %}{{ m['content'] }}"
        "{% else %}{% for c in m['content'] %}{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
        "{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    tdir = tempfile.mkdtemp()
    fast.save_pretrained(tdir)  # v5 tokenizers ignore vocab_file=: round-trip through a folder
    fast = PreTrainedTokenizerFast.from_pretrained(tdir)
    ids = fast.convert_tokens_to_ids
    images = Qwen2VLImageProcessor(patch_size=16, merge_size=2, temporal_patch_size=2, min_pixels=32 * 32, max_pixels=64 * 64)
    proc = Qwen3VLProcessor(image_processor=images, tokenizer=fast, video_processor=Qwen3VLVideoProcessor(),
                            chat_template=fast.chat_template)
    cfg = Qwen3VLConfig(
        text_config=dict(vocab_size=len(fast), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=4096,
                         rope_scaling={"rope_type": "default", "mrope_section": [2, 3, 3], "mrope_interleaved": True}),
        vision_config=dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=16, spatial_merge_size=2,
                           temporal_patch_size=2, out_hidden_size=32, num_position_embeddings=64, deepstack_visual_indexes=[0]),
        image_token_id=ids("<|image_pad|>"), video_token_id=ids("<|video_pad|>"),
        vision_start_token_id=ids("<|vision_start|>"), vision_end_token_id=ids("<|vision_end|>"))
    torch.manual_seed(0)
    model = Qwen3VLForConditionalGeneration(cfg).eval()
    model.generation_config.pad_token_id = fast.pad_token_id
    model.generation_config.eos_token_id = fast.eos_token_id
    model.save_pretrained(folder)
    proc.save_pretrained(folder)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny_qwen3_vl")
    _tiny_qwen3_vl(str(folder))
    return str(folder)


def _request(i: int) -> VLMRequest:
    img = np.full((48 + 16 * i, 64, 3), 90 + 40 * i, np.uint8)
    boxes = [dict(x1=2, y1=2, x2=30, y2=30), dict(x1=30, y1=10, x2=60, y2=40)]
    prompt = load_prompt("semantic").render(n=2, object_list=object_list(["cup", "table"]))
    return VLMRequest(image_png=encode_png(draw_markers(img, boxes)), prompt=prompt, image_id=f"im{i}", pass_name="semantic")


@pytest.mark.slow
def test_generates_one_answer_per_request_deterministically(tiny_model):
    cfg = TransformersConfig(model=tiny_model, batch_size=2, sampling=SamplingConfig(max_tokens=6))
    backend = TransformersBackend(cfg)
    reqs = [_request(0), _request(1), _request(2)]  # different image sizes in one padded batch
    out = backend.generate(reqs)
    assert len(out) == 3 and all(isinstance(t, str) and 0 < len(t) <= 6 for t in out)
    assert backend.generate(reqs) == out  # greedy decoding is repeatable
    res = parse_relations(out[0])  # random weights: unusable but counted, never raised
    assert res.reason in ("no_json", "no_relations", "empty")


def test_missing_model_folder_fails_clearly(tmp_path):
    with pytest.raises(Exception, match=str(tmp_path / "nope").split("/")[-1]):
        TransformersBackend(TransformersConfig(model=str(tmp_path / "nope")))
