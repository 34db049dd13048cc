"""Tiny random-weight models for tests, smoke runs and benchmarks (built offline from configs).

Nothing here downloads: the relation checkpoint is written with ``relate.checkpoint`` from a
2-block ViT, and the OWLv2 detector is built from an ``Owlv2Config`` with a character-level
CLIP tokenizer saved to the same folder (tokenizer constructors in transformers 5 need files,
so the vocabulary is written first and loaded with ``from_pretrained``).
"""

from __future__ import annotations

import json
import string
from pathlib import Path
from typing import Sequence

import numpy as np

__all__ = ["TINY_RELATION_MODEL", "save_tiny_checkpoint", "save_tiny_owlv2"]

TINY_RELATION_MODEL: dict = {
    "backbone": {"name": "vit_tiny_patch16_224", "img_size": 32, "depth": 2, "embed_dim": 32, "num_heads": 2,
                 "patch_size": 8, "taps": [-2, -1]},
    "dim": 32, "heads": 2, "scene_grid": 2, "geometry_hidden": 16, "gate_hidden": 16, "pair_layers": 1,
    "joint_layers": 1, "deformable": {"heads": 2, "points": 2},
    "sampler": {"geometry_keep": 64, "learned_keep": 32, "hidden": 16},
}


def save_tiny_checkpoint(folder: str | Path, strings: Sequence[str], seed: int = 0,
                         encoder: str = "minilm", text_dim: int = 384, model: dict | None = None) -> Path:
    """A checkpoint folder with seeded random weights and a random unit bank labelled ``encoder``
    (so loading needs no text encoder; request vocabularies still use the real one)."""
    import torch

    from relate.checkpoint import save_checkpoint
    from relate.model import RelationModelConfig, create_relation_model
    from relate.text.bank import TextBank

    cfg = RelationModelConfig.model_validate({**(model or TINY_RELATION_MODEL), "text_dim": text_dim})
    torch.manual_seed(seed)
    net = create_relation_model(cfg)
    m = np.random.default_rng(seed).standard_normal((len(strings), text_dim)).astype(np.float32)
    bank = TextBank(tuple(strings), m / np.linalg.norm(m, axis=1, keepdims=True), encoder)
    return save_checkpoint(folder, net, bank)


def save_tiny_owlv2(folder: str | Path, seed: int = 0) -> Path:
    """A 2-layer OWLv2 (64 px) with processor and tokenizer in ``folder``, loadable by AutoProcessor."""
    import torch
    from transformers import CLIPTokenizer, Owlv2Config, Owlv2ForObjectDetection, Owlv2ImageProcessor, Owlv2Processor

    folder = Path(folder)
    tok_dir = folder / "_tokenizer_files"
    tok_dir.mkdir(parents=True, exist_ok=True)
    # OWL masks a query whose first token id is 0, so the start token must not be id 0
    vocab: dict[str, int] = {t: i for i, t in enumerate(["!", "<|startoftext|>", "<|endoftext|>"])}
    for c in string.ascii_lowercase + string.digits + " .,-'":
        vocab.setdefault(c, len(vocab))
        vocab.setdefault(c + "</w>", len(vocab))
    (tok_dir / "vocab.json").write_text(json.dumps(vocab))
    (tok_dir / "merges.txt").write_text("#version: 0.2\n")
    tok = CLIPTokenizer(str(tok_dir / "vocab.json"), str(tok_dir / "merges.txt"), model_max_length=16)
    cfg = Owlv2Config(
        text_config={"vocab_size": len(vocab), "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                     "num_attention_heads": 2, "max_position_embeddings": 16, "bos_token_id": 1, "eos_token_id": 2,
                     "pad_token_id": 2},
        vision_config={"image_size": 64, "patch_size": 16, "hidden_size": 32, "intermediate_size": 64,
                       "num_hidden_layers": 2, "num_attention_heads": 2},
        projection_dim=32)
    torch.manual_seed(seed)
    model = Owlv2ForObjectDetection(cfg).eval()
    with torch.no_grad():  # random box deltas saturate the sigmoid; zero them so boxes sit on the patch grid
        model.box_head.dense2.weight.zero_()
        model.box_head.dense2.bias.zero_()
    proc = Owlv2Processor(image_processor=Owlv2ImageProcessor(size={"height": 64, "width": 64}), tokenizer=tok)
    model.save_pretrained(folder)
    proc.save_pretrained(folder)
    return folder
