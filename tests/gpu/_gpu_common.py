"""Shared pieces of the CUDA tests: the device pair, a tiny model, inputs and comparisons.

The device under test is ``cuda`` and the reference is ``cpu``. ``RELATE_TEST_GPU_DEVICE``
overrides the device under test (``cpu`` for a dry run of every code path on a machine without
CUDA; see ``tests/gpu/conftest.py``); it is never needed on a GPU machine.

Everything here imports without CUDA, Ray, FastAPI or a model hub: the relation model is built
from a config with random weights, and the one text encoder is a 2-layer random BERT with a
hand-written word-piece vocabulary saved to a temporary folder.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

DEVICE_ENV = "RELATE_TEST_GPU_DEVICE"
REFERENCE = torch.device("cpu")

# serve_apps/tiny.py's TINY_RELATION_MODEL (copied, so these tests import nothing from serve_apps),
# with dropout 0 so a training-mode forward is deterministic and smaller sampler budgets so a
# 12-box image exercises both top-k stages (132 candidates -> 40 -> 20 pairs).
TINY = {
    "backbone": {"name": "vit_tiny_patch16_224", "img_size": 32, "depth": 2, "embed_dim": 32, "num_heads": 2,
                 "patch_size": 8, "taps": [-2, -1]},
    "dim": 32, "heads": 2, "scene_grid": 2, "geometry_hidden": 16, "gate_hidden": 16, "pair_layers": 1,
    "joint_layers": 1, "deformable": {"heads": 2, "points": 2}, "dropout": 0.0,
    "sampler": {"geometry_keep": 40, "learned_keep": 20, "hidden": 16},
}
TEXT_DIM = 384  # MiniLM's width: the released bank size per predicate


def device_under_test() -> torch.device:
    return torch.device(os.environ.get(DEVICE_ENV, "").strip() or "cuda")


def tiny_model(seed: int = 0, text_dim: int = TEXT_DIM, **overrides):
    from relate.model import RelationModelConfig, create_relation_model

    cfg = RelationModelConfig.model_validate({**TINY, **overrides, "text_dim": text_dim})
    torch.manual_seed(seed)
    return create_relation_model(cfg)


def unit_rows(n: int, d: int, seed: int) -> np.ndarray:
    m = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def batch(n_boxes: tuple[int, ...] = (12, 5), side: int = 32, seed: int = 1):
    """Images (B, 3, side, side) in [0, 1], pixel boxes (B, N, 4) with padding, validity (B, N)."""
    g = torch.Generator().manual_seed(seed)
    n = max(n_boxes)
    images = torch.rand(len(n_boxes), 3, side, side, generator=g)
    boxes = torch.zeros(len(n_boxes), n, 4)
    valid = torch.zeros(len(n_boxes), n, dtype=torch.bool)
    for b, k in enumerate(n_boxes):
        xy = torch.rand(k, 2, generator=g) * side * 0.7
        wh = 3 + torch.rand(k, 2, generator=g) * side * 0.4
        boxes[b, :k] = torch.cat([xy, (xy + wh).clamp(max=side)], -1)
        valid[b, :k] = True
    return images, boxes, valid


def box_masks(boxes: torch.Tensor, valid: torch.Tensor, side: int) -> torch.Tensor:
    """(B, N, side, side) masks: each box with its top-left quarter cut out (so not a box)."""
    masks = torch.zeros(*valid.shape, side, side)
    for b, i in valid.nonzero().tolist():
        x1, y1, x2, y2 = boxes[b, i].round().long().tolist()
        masks[b, i, y1:max(y2, y1 + 1), x1:max(x2, x1 + 1)] = 1
        masks[b, i, y1:(y1 + y2) // 2, x1:(x1 + x2) // 2] = 0
        masks[b, i, y2 - 1 if y2 > y1 else y1, x1] = 1  # never empty
    return masks


def kept_pairs(sampled, b: int) -> dict[tuple[int, int], int]:
    """{(subject, object): position} of image ``b``'s kept pairs."""
    pairs, ok = sampled.pairs[b].cpu(), sampled.valid[b].cpu()
    return {(int(s), int(o)): k for k, ((s, o), v) in enumerate(zip(pairs.tolist(), ok.tolist())) if v}


def aligned(out_ref, out_dut, b: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions of image ``b``'s kept pairs in both outputs, in the reference's pair order."""
    ref, dut = kept_pairs(out_ref.sampled, b), kept_pairs(out_dut.sampled, b)
    assert set(ref) == set(dut), f"image {b}: kept pairs differ: only reference {sorted(set(ref) - set(dut))}, " \
                                 f"only device {sorted(set(dut) - set(ref))}"
    keys = sorted(ref)
    index = lambda pos: torch.tensor([pos[k] for k in keys], dtype=torch.long)  # noqa: E731
    return index(ref), index(dut)


def close(got: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float = 0.0, what: str = "") -> None:
    """``got`` (any device) equals ``ref`` within atol + rtol * |ref|, with the worst cell in the message."""
    got, ref = got.detach().double().cpu(), ref.detach().double().cpu()
    assert got.shape == ref.shape, f"{what}: shape {tuple(got.shape)} != {tuple(ref.shape)}"
    err = (got - ref).abs()
    bound = atol + rtol * ref.abs()
    if err.numel() and not bool((err <= bound).all()):
        i = int((err - bound).argmax())
        raise AssertionError(f"{what}: max |diff| {float(err.max()):.3g} (bound {atol:g} + {rtol:g}|ref|); worst "
                             f"cell {i}: {float(got.reshape(-1)[i]):.8g} vs {float(ref.reshape(-1)[i]):.8g}")


def tensors_of(obj, prefix: str = "") -> dict[str, torch.Tensor]:
    """Every tensor field of a (nested) dataclass output, by dotted name."""
    import dataclasses

    out: dict[str, torch.Tensor] = {}
    if isinstance(obj, torch.Tensor):
        out[prefix] = obj
    elif dataclasses.is_dataclass(obj):
        for f in dataclasses.fields(obj):
            out.update(tensors_of(getattr(obj, f.name), f"{prefix}.{f.name}" if prefix else f.name))
    elif isinstance(obj, (tuple, list)):
        for i, x in enumerate(obj):
            out.update(tensors_of(x, f"{prefix}[{i}]"))
    return out


def save_tiny_hf_encoder(folder: Path, dim: int = 32, seed: int = 0) -> str:
    """A 2-layer random BERT with a word-piece vocabulary of lower-case letters and a few words;
    returns its registry name ``hf:<folder>`` (loaded by relate.text.encoders with no network)."""
    from transformers import BertConfig, BertModel, BertTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    words = ["on", "under", "near", "holding", "behind", "above", "next", "to", "the", "of", "left", "right",
             "perched", "upon", "adjacent", "clutching", "riding", "wearing"]
    letters = [c for c in "abcdefghijklmnopqrstuvwxyz"]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words + letters + [f"##{c}" for c in letters]
    (folder / "vocab.txt").write_text("\n".join(dict.fromkeys(vocab)) + "\n")
    BertTokenizerFast(vocab_file=str(folder / "vocab.txt")).save_pretrained(folder)
    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size=len(dict.fromkeys(vocab)), hidden_size=dim, num_hidden_layers=2,
                     num_attention_heads=2, intermediate_size=2 * dim, max_position_embeddings=64)
    BertModel(cfg).eval().save_pretrained(folder)
    return f"hf:{folder}"


def fp32_reference_flags() -> dict[str, object]:
    """What the tests pin for fp32 parity: no TF32 in matmuls or cuDNN convolutions."""
    return {"torch.backends.cuda.matmul.allow_tf32": torch.backends.cuda.matmul.allow_tf32,
            "torch.backends.cudnn.allow_tf32": torch.backends.cudnn.allow_tf32}


__all__ = ["DEVICE_ENV", "REFERENCE", "TINY", "TEXT_DIM", "device_under_test", "tiny_model", "unit_rows", "batch",
           "box_masks", "kept_pairs", "aligned", "close", "tensors_of", "save_tiny_hf_encoder",
           "fp32_reference_flags"]
