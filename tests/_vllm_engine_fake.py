"""Only the vLLM engine, faked: our ``ray.data.llm`` processor runs for real up to the engine.

vllm cannot be installed here, so Ray's vLLM engine stage cannot start its engine. Everything
else is Ray's and ours, unchanged: ``build_processor`` with our preprocess (prompt and image),
Ray's chat-template, tokenize and detokenize stages on a tiny processor written locally (no hub),
Ray's engine-stage UDF (``vLLMEngineStageUDF``: batching, per-row error handling) and our
postprocess. Inside that UDF, the object it builds as its engine (``vLLMEngineWrapper``) is
replaced by :class:`FakeVLLMEngine`, which takes each row exactly as the real wrapper does
(``_prepare_llm_request``: ``prompt``, ``tokenized_prompt``, ``multimodal_data``,
``sampling_params``, ...), checks it the way vLLM would (image placeholders vs images,
``SamplingParams`` fields), writes what it received to a folder for the test to read, and answers.

``install(monkeypatch, ...)`` patches ``ray.data.llm.build_processor`` so every processor built
afterwards (our jobs call it inside) gets the fake engine through Ray's own
``override_stage_config_fn`` hook; the engine stage's GPU request is recorded and dropped (no GPU).
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable

IMAGE_TOKEN = "<image>"
# keyword arguments of vllm.SamplingParams (vllm/sampling_params.py) we accept, with their types
SAMPLING_FIELDS = {"n": int, "temperature": float, "top_p": float, "top_k": int, "min_p": float, "seed": int,
                   "max_tokens": int, "min_tokens": int, "stop": list, "presence_penalty": float,
                   "frequency_penalty": float, "repetition_penalty": float, "ignore_eos": bool,
                   "detokenize": bool, "skip_special_tokens": bool, "logprobs": int}
MODALITIES = ("image", "video", "audio")  # vLLM's MultiModalDataDict keys


def write_tiny_processor(path: str | Path) -> str:
    """A LLaVA-style processor (byte-level BPE tokenizer, CLIP image processor, a chat template that
    renders a system turn and writes ``<image>`` for an image part) and its config.json; no weights."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import (CLIPImageProcessor, CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaProcessor,
                              PreTrainedTokenizerFast)

    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    for s in ("<unk>", "<s>", "</s>", "<pad>", IMAGE_TOKEN):
        vocab[s] = len(vocab)
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    core.pre_tokenizer, core.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    template = ("{% for m in messages %}<|{{ m['role'] }}|>{% for c in m['content'] %}{% if c['type'] == 'image' %}"
                "<image>{% else %}{{ c['text'] }}{% endif %}{% endfor %}\n{% endfor %}"
                "{% if add_generation_prompt %}<|assistant|>{% endif %}")
    tok = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                  pad_token="<pad>", additional_special_tokens=[IMAGE_TOKEN])
    proc = LlavaProcessor(image_processor=CLIPImageProcessor(size={"shortest_edge": 32},
                                                             crop_size={"height": 32, "width": 32}),
                          tokenizer=tok, patch_size=8, vision_feature_select_strategy="default",
                          chat_template=template, num_additional_image_tokens=1)
    proc.save_pretrained(path)
    LlavaConfig(vision_config=CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                               num_attention_heads=2, image_size=32, patch_size=8),
                text_config=LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                        num_attention_heads=2, num_key_value_heads=2),
                image_token_id=tok.convert_tokens_to_ids(IMAGE_TOKEN)).save_pretrained(path)
    return str(path)


class _Engine:
    async def do_log_stats(self) -> None:  # what the UDF calls on its engine after each batch
        return None


class FakeVLLMEngine:
    """Stands where ``vLLMEngineWrapper`` stands, with its interface (``generate_async``,
    ``get_scheduler_config``, ``shutdown``, ``engine.do_log_stats``, ``max_pending_requests``)."""

    def __init__(self, idx_in_batch_column: str, max_pending_requests: int | None = None,
                 dynamic_lora_loading_path: str | None = None, log_engine_metrics: bool = True, *,
                 record_dir: str, answer: Callable[[dict, str], str], fail: Callable[[dict], str | None], **kwargs):
        from transformers import AutoTokenizer

        self.idx_column, self.answer, self.fail = idx_in_batch_column, answer, fail
        self.model = kwargs.pop("model")
        source = kwargs.pop("model_source")
        self.tokenizer = AutoTokenizer.from_pretrained(source)
        self.image_token_id = self.tokenizer.convert_tokens_to_ids(IMAGE_TOKEN)
        self.max_pending_requests = max_pending_requests if max_pending_requests is not None else 64
        self.engine = _Engine()
        self.request_id = 0
        self.dir = Path(record_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.name = uuid.uuid4().hex[:12]
        (self.dir / f"engine-{self.name}.json").write_text(json.dumps({"model": self.model, "model_source": source,
                                                                        "engine_kwargs": kwargs}, default=str))

    def get_scheduler_config(self) -> Any:
        return SimpleNamespace(max_num_seqs=64)

    def shutdown(self) -> None:
        return None

    def _check(self, prompt: str | None, tokens: list[int] | None, mm: Any, sampling: Any) -> list[str]:
        """What vLLM would refuse: every problem found, as text."""
        from PIL import Image

        problems = []
        if not prompt and not tokens:
            problems.append("neither prompt nor tokenized_prompt")
        if not isinstance(sampling, dict):
            problems.append(f"sampling_params is {type(sampling).__name__}, not a dict")
        else:
            for k, v in sampling.items():
                if k not in SAMPLING_FIELDS:
                    problems.append(f"SamplingParams has no field {k!r}")
                elif not isinstance(v, SAMPLING_FIELDS[k]) and not (SAMPLING_FIELDS[k] is float and isinstance(v, int)):
                    problems.append(f"sampling_params[{k!r}] is {type(v).__name__}")
        if not isinstance(mm, dict) or not mm:
            problems.append(f"multimodal_data is {mm!r:.80}, not a non-empty dict")
            return problems
        if set(mm) - set(MODALITIES):
            problems.append(f"unknown modalities {sorted(set(mm) - set(MODALITIES))}")
        images = mm.get("image")
        images = images if isinstance(images, list) else [images]
        if not all(isinstance(im, Image.Image) for im in images):
            problems.append(f"images are {[type(im).__name__ for im in images]}, not PIL images")
        placeholders = list(tokens or []).count(self.image_token_id)
        if placeholders != len(images):
            problems.append(f"{placeholders} image placeholder token(s) for {len(images)} image(s)")
        return problems

    async def generate_async(self, row: dict) -> tuple[Any, dict, float]:
        from PIL import Image
        from ray.llm._internal.batch.stages.vllm_engine_stage import vLLMEngineRequest, vLLMOutputData

        # what vLLMEngineWrapper._prepare_llm_request takes out of the row
        prompt = row.pop("prompt", None)
        tokens = row.pop("tokenized_prompt", None)
        tokens = None if tokens is None else [int(t) for t in tokens]
        mm = row.pop("multimodal_data", None)
        mm_kwargs, mm_uuids = row.pop("mm_processor_kwargs", None), row.pop("multimodal_uuids", None)
        row.pop("tokenization_kwargs", None)
        if "model" in row and row["model"] != self.model:
            raise ValueError(f"row column 'model'={row['model']!r} would make this a LoRA request")
        sampling = row.pop("sampling_params", None)
        request = vLLMEngineRequest(request_id=self.request_id, idx_in_batch=row[self.idx_column], prompt=prompt,
                                    prompt_token_ids=tokens, multimodal_data=mm, mm_processor_kwargs=mm_kwargs,
                                    multimodal_uuids=mm_uuids, params=sampling)
        self.request_id += 1
        key = f"{self.name}-{request.request_id}"
        images = (mm or {}).get("image") if isinstance(mm, dict) else None
        images = images if isinstance(images, list) else ([images] if images is not None else [])
        files = []
        for j, im in enumerate(images):
            if isinstance(im, Image.Image):
                im.save(self.dir / f"{key}-{j}.engine.png")
                files.append(f"{key}-{j}.engine.png")
        if isinstance(row.get("image_png"), bytes):  # the image our row carried, to compare pixels with
            (self.dir / f"{key}.row.png").write_bytes(row["image_png"])
        problems = self._check(prompt, tokens, mm, sampling)
        failure = self.fail(row)
        record = {"key": key, "row_id": row.get("image_id") or row.get("call_id"), "prompt": prompt,
                  "tokens": tokens, "modalities": sorted(mm) if isinstance(mm, dict) else None,
                  "image_modes": [getattr(im, "mode", None) for im in images],
                  "image_sizes": [list(getattr(im, "size", ())) for im in images], "engine_images": files,
                  "sampling_params": sampling, "mm_processor_kwargs": mm_kwargs, "problems": problems,
                  "failed": failure}
        (self.dir / f"{key}.request.json").write_text(json.dumps(record, default=str))
        if problems:
            raise ValueError("vLLM would refuse this request: " + "; ".join(problems))
        if failure:
            raise ValueError(failure)
        text = self.answer(row, prompt or "")
        out = self.tokenizer.encode(text, add_special_tokens=False)
        data = vLLMOutputData(prompt=prompt or "", prompt_token_ids=tokens, num_input_tokens=len(tokens or []),
                              generated_tokens=out, generated_text=text, num_generated_tokens=len(out))
        return request, data.model_dump(), 0.0


def fake_engine_udf(record_dir: str, answer: Callable, fail: Callable) -> type:
    """Ray's ``vLLMEngineStageUDF``, unchanged except that the engine it builds is the fake."""
    from ray.llm._internal.batch.stages import vllm_engine_stage as stage

    class FakeEngineStageUDF(stage.vLLMEngineStageUDF):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            real = stage.vLLMEngineWrapper
            stage.vLLMEngineWrapper = functools.partial(FakeVLLMEngine, record_dir=record_dir, answer=answer, fail=fail)
            try:
                super().__init__(*args, **kwargs)
            finally:
                stage.vLLMEngineWrapper = real

    return FakeEngineStageUDF


def install(monkeypatch: Any, record_dir: str | Path, answer: Callable[[dict, str], str],
            fail: Callable[[dict], str | None] = lambda row: None) -> list[dict]:
    """Every processor built from now on runs the fake engine; returns (filled as processors are
    built) what each engine stage asked Ray for, and the processor's stage names."""
    import sys

    import ray.data.llm as rdl
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray's workers cannot import tests/
    real_build = rdl.build_processor
    seen: list[dict] = []
    udf = fake_engine_udf(str(record_dir), answer, fail)

    def swap(name: str, stage: Any) -> None:
        seen.append({"stage": name})
        if name == "vLLMEngineStage":
            kw = stage.map_batches_kwargs  # mutated in place: the stage's validators stay out of it
            seen[-1].update(asked={k: kw.get(k) for k in ("num_gpus", "num_cpus", "resources", "accelerator_type")})
            for k in ("num_gpus", "resources", "accelerator_type"):
                kw.pop(k, None)
            object.__setattr__(stage, "fn", udf)

    def build(config: Any, *args: Any, builder_kwargs: dict | None = None, **kw: Any) -> Any:
        seen.append({"config": config})
        return real_build(config, *args, builder_kwargs={**(builder_kwargs or {}), "override_stage_config_fn": swap},
                          **kw)

    monkeypatch.setattr(rdl, "build_processor", build)
    return seen


def read_requests(record_dir: str | Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(Path(record_dir).glob("*.request.json"))]


def pixels(path: str | Path) -> bytes:
    """The RGB pixels of an image file, for equality checks (not the encoding)."""
    from PIL import Image

    with Image.open(path) as im:
        rgb = im.convert("RGB")
        return hashlib.sha1(rgb.tobytes() + repr(rgb.size).encode()).digest()


def png_pixels(png: bytes) -> bytes:
    return pixels(io.BytesIO(png))
