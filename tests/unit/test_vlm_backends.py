"""Backend registry, configs, the scripted annotator, and the vLLM processor config (no vllm needed)."""

from __future__ import annotations

import importlib.util

import pytest

from actors.vlm import (ERROR_TYPES, VLM_BACKENDS, ErrorRates, ScriptedAnnotator, ScriptedConfig, VLLMConfig, VLMBackend,
                        VLMConfig, VLMRequest, create_backend)
from actors.vlm.vllm_data import build_vllm_processor_config, vllm_preprocess
from relate.config import ConfigError, load_config
from relate.data.synthetic import SyntheticConfig, make_scene
from relate.parsing import parse_relations


def _req(scene, pass_name, draft=()):
    ref = [dict(subject=r["subject"], object=r["object"], predicate=r["predicate"]) for r in scene.relations]
    return VLMRequest(image_png=b"", prompt="p", image_id=scene.image_id, pass_name=pass_name, boxes=scene.boxes,
                      reference=ref, draft=tuple(draft))


def test_registry_and_config_errors():
    assert {"scripted", "openai", "transformers"} <= set(VLM_BACKENDS.names())
    assert isinstance(create_backend(VLMConfig()), VLMBackend)
    with pytest.raises(ValueError, match="needs a 'openai' section"):
        VLMConfig(backend="openai")
    with pytest.raises(ValueError, match="ray.data.llm"):
        create_backend(VLMConfig(backend="vllm", vllm=VLLMConfig(model_source="m")))
    with pytest.raises(ConfigError, match="scripted.errors.typo"):
        load_config(VLMConfig, None, ["scripted.errors.typo=0.1"])


def test_scripted_outputs_are_a_pure_function_of_seed_image_and_pass():
    scene = make_scene(4, SyntheticConfig(seed=2))
    a = ScriptedAnnotator(ScriptedConfig(seed=1)).generate([_req(scene, "spatial")])
    b = ScriptedAnnotator(ScriptedConfig(seed=1)).generate([_req(scene, "spatial")])
    c = ScriptedAnnotator(ScriptedConfig(seed=2)).generate([_req(scene, "spatial")])
    assert a == b and a != c


def test_scripted_truth_is_emitted_and_parsed_back():
    cfg = ScriptedConfig(errors=ErrorRates(**{k: 0.0 for k in ERROR_TYPES}), format_noise=1.0, direction_bias=0.0,
                         grow_share=0.0)
    ann = ScriptedAnnotator(cfg)
    scene = make_scene(7, SyntheticConfig(seed=1))
    got = set()
    for p in ("semantic", "grow", "spatial"):
        text = ann.generate([_req(scene, p)])[0]
        assert "```json" in text  # formatting noise on, still recoverable
        res = parse_relations(text, labels=[b["category"] for b in scene.boxes])
        assert res.usable and not res.problems, res.problems
        got |= {(r.subject, r.predicate, r.object) for r in res.relations}
    assert got == {(r["subject"], r["predicate"], r["object"]) for r in scene.relations}


def test_scripted_injects_every_error_kind_with_labels():
    ann = ScriptedAnnotator(ScriptedConfig(errors=ErrorRates(**{k: 1.0 for k in ERROR_TYPES if k != "malformed_json"},
                                                             malformed_json=0.0)))
    tags = set()
    for i in range(40):
        scene = make_scene(i, SyntheticConfig(seed=0))
        for p in ("semantic", "grow", "spatial"):
            draft = [(r["subject"], r["predicate"], r["object"]) for r in scene.relations]
            tags |= set(ann.plan(_req(scene, p, draft)).tags())
    # person_duplicate needs a duplicated person box, which the pipeline's noise step adds
    assert tags == set(ERROR_TYPES) - {"malformed_json", "person_duplicate"}


def test_malformed_outputs_are_unusable_and_counted():
    ann = ScriptedAnnotator(ScriptedConfig(errors=ErrorRates(malformed_json=1.0)))
    scene = make_scene(1, SyntheticConfig(seed=0))
    for p in ("semantic", "spatial"):
        req = _req(scene, p)
        assert ann.plan(req).malformed is not None
        assert parse_relations(ann.generate([req])[0]).reason == "no_json"


def test_vllm_processor_config_builds_without_vllm():
    import io

    from PIL import Image

    assert importlib.util.find_spec("vllm") is None or True  # the point: nothing below imports it
    cfg = VLLMConfig(model_source="Qwen/Qwen2.5-VL-7B-Instruct", batch_size=8, concurrency=2,
                     engine_kwargs={"max_model_len": 4096, "tensor_parallel_size": 2})
    pc = build_vllm_processor_config(cfg, cpu_stage_num_cpus=0.25)
    assert type(pc).__name__ == "vLLMEngineProcessorConfig"
    assert pc.model_source == cfg.model_source and pc.batch_size == 8 and pc.concurrency == 2
    assert pc.engine_kwargs["tensor_parallel_size"] == 2 and pc.should_continue_on_error
    # vLLM's prepare-multimodal stage (needs vllm on the CPU workers) is off: our preprocess decodes
    assert not pc.prepare_multimodal_stage.enabled and pc.chat_template_stage.num_cpus == 0.25
    buf = io.BytesIO()
    Image.new("RGB", (7, 5), (10, 20, 30)).save(buf, format="PNG")
    row = vllm_preprocess({"image_png": buf.getvalue(), "prompt": "list relations", "image_id": "a"}, cfg, "be exact")
    assert row["messages"] == [{"role": "system", "content": [{"type": "text", "text": "be exact"}]},
                               {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "list relations"}]}]
    (im,) = row["multimodal_data"]["image"]
    assert im.mode == "RGB" and im.size == (7, 5) and im.getpixel((3, 2)) == (10, 20, 30)
    assert row["sampling_params"] == {"temperature": 0.0, "top_p": 1.0, "max_tokens": 1024} and row["image_id"] == "a"
    assert vllm_preprocess({"image_png": None, "prompt": "", "image_id": "b"}, cfg)["__inference_error__"]
    assert vllm_preprocess({"image_png": buf.getvalue(), "prompt": "p"}, cfg)["messages"][0]["role"] == "user"