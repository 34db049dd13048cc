"""Our ray.data.llm vLLM processor run for real up to the engine, in the annotation and the judge job.

Only the engine is faked (tests/_vllm_engine_fake.py: Ray's engine-stage UDF builds a fake in
place of its vLLM engine wrapper); our prompt and image stage, Ray's chat-template, tokenize and
detokenize stages (on a tiny local processor), Ray's per-row error handling and our parse stage
run as on a GPU cluster. Checked: what reaches the engine (prompt tokens with one image
placeholder per image, ``multimodal_data={"image": [PIL RGB image]}`` with our marked image's
pixels, the system prompt, sampling as configured), and an engine error on one row becoming a
recorded failure while the other rows are answered."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from PIL import Image

import _vllm_engine_fake as fake
from _flaky_vlm import answer_for
from pipelines.annotate import AnnotateConfig, main as annotate_main
from relate.prompts import load_prompt
from test_annotate import _world
from test_judge_job import _cfg as judge_cfg, judge_world

pytestmark = pytest.mark.slow

SAMPLING = {"temperature": 0.2, "top_p": 0.9, "max_tokens": 77}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return judge_world(tmp_path_factory.mktemp("judge_world"))


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return fake.write_tiny_processor(tmp_path_factory.mktemp("tiny_vlm_processor"))


def _answerer():
    """The flaky server's plausible answers (relations between the prompt's numbered objects), by value:
    Ray's workers cannot import tests/."""
    import sys

    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[answer_for.__module__])
    return lambda row, prompt: answer_for(prompt, hashlib.sha1(prompt.encode()).hexdigest())


def _check_requests(reqs: list[dict], tiny_model: str, system: str, record_dir: Path) -> None:
    """Every request in the layout vLLM's engine takes, with our image and our settings."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model)
    image_id = tok.convert_tokens_to_ids(fake.IMAGE_TOKEN)
    assert reqs
    for r in reqs:
        assert r["problems"] == [], r["problems"]
        assert r["modalities"] == ["image"] and r["image_modes"] == ["RGB"] and len(r["engine_images"]) == 1
        assert r["sampling_params"] == SAMPLING
        assert r["tokens"] == tok(r["prompt"])["input_ids"] and r["tokens"].count(image_id) == 1
        # the chat template ran: system turn first, then the user turn with the image before the prompt text
        assert r["prompt"].startswith("<|system|>" + system.strip()), r["prompt"][:200]
        user = r["prompt"].index("<|user|>")
        assert r["prompt"].index(fake.IMAGE_TOKEN) > user and r["prompt"].endswith("<|assistant|>")
        # the image the engine got is, pixel for pixel, the PNG our row carried
        assert fake.pixels(record_dir / r["engine_images"][0]) == fake.pixels(record_dir / f"{r['key']}.row.png")


@pytest.mark.timeout(1500)  # 3 passes x 4 actor pools on 2 shared cores: ~7 min on a loaded machine
def test_annotation_vllm_processor_up_to_the_engine(ray_session, tmp_path, tiny_model, monkeypatch):
    from pipelines.annotate_shards import read_failures
    from relate.markers import draw_markers

    inp = _world(tmp_path / "world", 6)
    record = tmp_path / "engine"
    ids = sorted(p.stem for p in (inp / "images").glob("*.png"))
    broken, corrupt = ids[3], ids[5]  # the engine fails on one; another is a truncated file (never a call)
    data = (inp / "images" / f"{corrupt}.png").read_bytes()
    (inp / "images" / f"{corrupt}.png").write_bytes(data[:len(data) // 2])
    seen = fake.install(monkeypatch, record, _answerer(),
                        fail=lambda row: ("The decoder prompt (length 9999) is longer than the maximum model length"
                                          if row.get("image_id") == broken else None))
    cfg = AnnotateConfig.model_validate(dict(
        input_dir=str(inp), out_dir=str(tmp_path / "out"), splits=["train", "val"], shard_size=6, cpu_batch_size=6,
        cpu_resources=dict(num_cpus=0.05),
        vlm=dict(backend="vllm", vllm=dict(model_source=tiny_model, batch_size=4, sampling=SAMPLING,
                                           engine_kwargs={"max_model_len": 4096, "limit_mm_per_prompt": {"image": 1}})),
        generate=dict(resources=dict(num_cpus=0.05, num_gpus=0.5, resources={"annotator": 0.01}))))
    res = annotate_main(cfg)

    # three processors (one per pass), each with Ray's stages in order and the engine asking for its GPU bundle
    stages = [s["stage"] for s in seen if "stage" in s]
    assert stages == ["ChatTemplateStage", "TokenizeStage", "vLLMEngineStage", "DetokenizeStage"] * 3
    asked = [s["asked"] for s in seen if "asked" in s]
    assert asked == [{"num_gpus": 0.5, "num_cpus": 0.05, "resources": {"annotator": 0.01}, "accelerator_type": None}] * 3
    engines = [json.loads(p.read_text()) for p in record.glob("engine-*.json")]
    assert engines and all(e["engine_kwargs"]["max_model_len"] == 4096 and e["model_source"] == tiny_model for e in engines)

    reqs = fake.read_requests(record)
    _check_requests(reqs, tiny_model, load_prompt("system_annotate").text, record)
    # every readable image reached the engine; the broken one once (its later passes are not calls),
    # the truncated one never (a rejection, passed by Ray's stages without engine work)
    assert {r["row_id"] for r in reqs} == set(ids) - {corrupt} and sum(r["row_id"] == broken for r in reqs) == 1
    # the engine saw our marked image: the source pixels with the numbered markers drawn
    import pyarrow as pa
    records = pa.concat_tables([pq.read_table(p) for p in sorted((inp / "corpus").rglob("*.parquet"))]).to_pylist()
    boxes = {r["image_id"]: r["boxes"] for r in records}
    for r in reqs:
        src = np.asarray(Image.open(inp / "images" / f"{r['row_id']}.png").convert("RGB"))
        marked = draw_markers(src, boxes[r["row_id"]], id_base=cfg.id_base, outlines=cfg.outlines)
        assert np.array_equal(np.asarray(Image.open(record / r["engine_images"][0])), marked), r["row_id"]

    # the engine error on one row is a recorded failure; every other image was answered and annotated
    failures = read_failures(Path(cfg.out_dir)).to_pylist()
    assert [(f["image_id"], f["kind"], f["pass"], f["attempts"]) for f in failures] == [(broken, "engine_error", "semantic", 1)]
    assert "longer than the maximum model length" in failures[0]["message"]
    assert not res.complete and res.shards_incomplete == len({f["shard"] for f in failures})
    kept = pa.concat_tables([pq.read_table(p) for p in (Path(cfg.out_dir) / "corpus").rglob("*.parquet")]) \
        if list((Path(cfg.out_dir) / "corpus").rglob("*.parquet")) else None
    done = set() if kept is None else set(kept.column("image_id").to_pylist())
    assert broken not in done
    stats = res.stats
    assert stats["vlm"]["failed_calls"] == {"engine_error": 1}
    answered = stats["vlm"]["calls"] - 1  # every call made, less the failed one
    assert answered == len(reqs) - 1 == 3 * (len(ids) - 2)
    rejected = pa.concat_tables([pq.read_table(p) for p in (Path(cfg.out_dir) / "rejections").rglob("*.parquet")])
    assert corrupt in rejected.column("image_id").to_pylist() and corrupt not in {f["image_id"] for f in failures}


@pytest.mark.timeout(1200)
def test_judge_vllm_processor_up_to_the_engine(ray_session, world, tmp_path, tiny_model, monkeypatch):
    import zlib

    from eval_jobs.judge import load_audit, main as judge_main
    from pipelines.annotate_shards import read_failures

    record, healed = tmp_path / "engine", tmp_path / "healed"

    def failing(row: dict) -> str | None:  # about one call in four, chosen by id, until the engine is healed
        bad = zlib.crc32(row["call_id"].encode()) % 4 == 0 and not healed.exists()
        return "engine rejected the request" if bad else None

    seen = fake.install(monkeypatch, record, lambda row, prompt: 'ok {"answer": "yes"}', fail=failing)
    cfg = judge_cfg(world, tmp_path / "run", max_images=2, relation={"depths": ["matched"], "matched_k": 3},
                    graph={"enabled": False}, a5_requires_certification=False,
                    resources={"num_cpus": 0.05, "num_gpus": 0.5},
                    judge={"backend": "vllm", "vllm": {"model_source": tiny_model, "sampling": SAMPLING}})
    first = judge_main(cfg)
    assert [s["stage"] for s in seen if "stage" in s] == ["ChatTemplateStage", "TokenizeStage", "vLLMEngineStage",
                                                          "DetokenizeStage"]
    assert [s["asked"] for s in seen if "asked" in s] == [{"num_gpus": 0.5, "num_cpus": 0.05, "resources": None,
                                                           "accelerator_type": None}]
    reqs = fake.read_requests(record)
    _check_requests(reqs, tiny_model, load_prompt("system_judge").text, record)
    # an engine error is a recorded failure (kind, message, attempts), not an empty answer; its shard is not done
    fails = read_failures(Path(cfg.out_dir)).to_pylist()
    failed = {r["row_id"] for r in reqs if r["failed"]}
    assert failed and len(failed) < len(reqs) and not first["complete"]
    assert sorted(f["call_id"] for f in fails) == sorted(failed)
    assert all(f["kind"] == "engine_error" and f["attempts"] == 1 and "engine rejected" in f["message"] for f in fails)
    assert first["run"]["vlm"]["failed_calls"] == {"engine_error": len(failed)} == first["run"]["vlm"]["outstanding_failures"]
    # the rerun sends the engine exactly the failed calls and writes every answer
    healed.touch()
    before = {r["key"] for r in reqs}
    res = judge_main(cfg)
    again = [r for r in fake.read_requests(record) if r["key"] not in before]
    assert sorted(r["row_id"] for r in again) == sorted(failed) and not any(r["failed"] for r in again)
    assert res["complete"] and res["run"]["calls_made"] == res["run"]["calls_retried"] == len(failed)
    audit = load_audit(cfg.out_dir).to_pylist()
    assert len(audit) == res["calls"]["total"] == len(reqs) > 0
    by_id = {r["row_id"]: r for r in reqs}
    for a in audit:
        # the engine got this call's own prompt text, after the system turn
        assert a["prompt"] in by_id[a["call_id"]]["prompt"]
        assert a["raw_answer"] == 'ok {"answer": "yes"}' and a["verdict"] == "yes"
    assert res["calls"]["unparseable"] == 0
