"""Hugging Face transformers image-text-to-text annotator, for local runs without a server.

Loads the processor and model once (``AutoProcessor`` / ``AutoModelForImageTextToText``, so any
chat VLM with an image-text-to-text head works: Qwen-VL, Gemma 3, Idefics, LLaVA ...), renders
each request with the model's own chat template, and decodes only the new tokens. Whatever the
processor returns (e.g. ``mm_token_type_ids`` for Qwen3-VL) is passed to ``generate`` unchanged.
"""

from __future__ import annotations

from typing import Sequence

from actors.vlm.base import VLM_BACKENDS, VLMRequest
from actors.vlm.configs import TransformersConfig

__all__ = ["TransformersBackend"]


class TransformersBackend:
    """Batch of requests -> answers with ``model.generate`` (greedy unless temperature > 0)."""

    def __init__(self, cfg: TransformersConfig) -> None:
        import torch
        from transformers import AutoModelForImageTextToText, AutoProcessor

        self.cfg = cfg
        self._torch = torch
        self.processor = AutoProcessor.from_pretrained(cfg.model)
        self.model = AutoModelForImageTextToText.from_pretrained(cfg.model, dtype=getattr(torch, cfg.dtype))
        self.model.to(cfg.device).eval()
        tok = getattr(self.processor, "tokenizer", None)
        if tok is not None:
            tok.padding_side = "left"  # decoder-only batching: pad on the left so answers align

    def _chat(self, prompt: str) -> str:
        messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": prompt}]}]
        return self.processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)

    def _batch(self, requests: Sequence[VLMRequest]) -> list[str]:
        from relate.markers import decode_image
        from PIL import Image

        texts = [self._chat(r.prompt) for r in requests]
        images = [Image.fromarray(decode_image(r.image_png)) for r in requests]
        inputs = self.processor(text=texts, images=images, return_tensors="pt", padding=True).to(self.cfg.device)
        s = self.cfg.sampling
        kw = dict(max_new_tokens=s.max_tokens, do_sample=s.temperature > 0)
        if s.temperature > 0:
            kw.update(temperature=s.temperature, top_p=s.top_p)
        with self._torch.inference_mode():
            out = self.model.generate(**inputs, **kw)
        new = out[:, inputs["input_ids"].shape[1]:]
        return [str(t) for t in self.processor.batch_decode(new, skip_special_tokens=True)]

    def generate(self, requests: Sequence[VLMRequest]) -> list[str]:
        out: list[str] = []
        for i in range(0, len(requests), self.cfg.batch_size):
            out += self._batch(requests[i:i + self.cfg.batch_size])
        return out


VLM_BACKENDS.register("transformers")(TransformersBackend)
