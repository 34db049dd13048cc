"""Failures as data and bad images as rejections, without Ray: the HTTP client against a real
local server that fails on a schedule, the stages on plain tables, the shard files they leave."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from _flaky_vlm import flaky_vlm
from actors.vlm.base import VLMRequest
from actors.vlm.configs import OpenAIConfig
from actors.vlm.http import HTTPBackendError, OpenAIBackend
from pipelines.annotate import AnnotateConfig, annotate_local, shard_plan
from pipelines.annotate_input import ImagesInput, read_boxes_file
from pipelines.annotate_shards import read_failures, shard_paths
from pipelines.annotate_stages import GateStage, MarkStage, ParseStage, PassesStage
from pipelines.annotate_writer import RunTally, SpoolStage, finish_shard
from pipelines.vlm_calls import UNAVAILABLE
from relate.annotation_stats import IMAGE_RULES, annotation_statistics, format_vlm_line
from relate.gate import GateConfig


def _req(i: int) -> VLMRequest:
    return VLMRequest(image_png=f"img{i}".encode(), prompt=f"Objects:\n1: cup\n2: table\n3: dog\nrequest {i}",
                      image_id=f"im{i}", pass_name="semantic")


def test_http_client_retries_then_records_each_failure_with_kind_and_attempts():
    with flaky_vlm(timeout_sleep_s=2.5) as srv:  # timeouts far above a normal answer's time (see below)
        be = OpenAIBackend(OpenAIConfig(base_url=srv.url, max_retries=1, backoff_s=0.0, timeout_s=1.5, max_concurrency=8))
        reqs = [_req(i) for i in range(40)]
        outs = be.generate_outcomes(reqs)
        failed = [o for o in outs if not o.ok]
        assert len(failed) == len(srv.failed_at_end_of(1)) > 0  # exactly the calls the server kept failing
        assert {o.kind for o in failed} <= {"http_503", "malformed_response", "timeout"}
        assert all(o.attempts == 2 and o.text is None and o.message for o in failed)
        ok = [o for o in outs if o.ok]
        assert ok and all(o.text.startswith("```json") for o in ok)
        assert any(o.attempts == 2 for o in ok)  # a failure the retry repaired
        assert be.retries == sum(o.attempts - 1 for o in outs)
        # the judge's interface still reads a failure as an empty answer
        srv.hard = False
        assert all(isinstance(t, str) for t in be.generate(reqs[:3]))
        be.close()


def test_http_client_wrong_url_is_a_configuration_error():
    with flaky_vlm(mode="clean") as srv:
        be = OpenAIBackend(OpenAIConfig(base_url=srv.url.replace("/v1", "/v2"), max_retries=3, backoff_s=0.0))
        with pytest.raises(HTTPBackendError, match="HTTP 404.*check base_url"):
            be.generate_outcomes([_req(0)])
        assert len(srv.log) == 0 or all(o == "ok" for *_, o in srv.log)
        be.close()


def _image_rows(tmp_path: Path) -> list[dict]:
    """A good PNG, a truncated JPEG, a corrupt file, a missing file, boxes outside the image."""
    rng = np.random.default_rng(0)
    px = (rng.random((64, 80, 3)) * 255).astype(np.uint8)
    Image.fromarray(px).save(tmp_path / "good.png")
    Image.fromarray(px).save(tmp_path / "full.jpg", quality=90)
    data = (tmp_path / "full.jpg").read_bytes()
    (tmp_path / "cut.jpg").write_bytes(data[: len(data) // 2])
    (tmp_path / "noise.jpg").write_bytes(b"GIF87a? no: bytes that are not an image at all" * 8)
    box = dict(category="cup", is_person=False, is_body_part=False)
    inside = [dict(box, x1=2.0, y1=2.0, x2=30.0, y2=30.0), dict(box, x1=20.0, y1=10.0, x2=70.0, y2=60.0)]
    outside = [inside[0], dict(box, x1=40.0, y1=10.0, x2=120.0, y2=60.0)]
    rows = []
    for name, uri, boxes in (("a_good", "good.png", inside), ("b_cut", "cut.jpg", inside), ("c_noise", "noise.jpg", inside),
                             ("d_missing", "missing.png", inside), ("e_outside", "good.png", outside)):
        rows.append(dict(image_id=name, uri=str(tmp_path / uri), width=0, height=0, source="user", split="train",
                         boxes=boxes, reference=[], shard="train/part-00000"))
    return rows


def test_bad_images_become_rejections_naming_image_and_reason(tmp_path):
    rows = _image_rows(tmp_path)
    out = GateStage()(ParseStage("semantic")(MarkStage()(pa.Table.from_pylist(rows)))).to_pylist()
    by_id = {r["image_id"]: r for r in out}
    expect = {"b_cut": "image_truncated", "c_noise": "image_undecodable", "d_missing": "image_missing",
              "e_outside": "boxes_outside_image"}
    for image_id, rule in expect.items():
        (rej,) = by_id[image_id]["rejected"]
        assert rej["rule"] == rule and rej["subject"] == rej["object"] == -1 and rule in IMAGE_RULES
        assert by_id[image_id]["uri"] in rej["predicate"] and by_id[image_id]["relations"] == []
    assert "falls outside the 80x64 image" in by_id["e_outside"]["rejected"][0]["predicate"]
    good = by_id["a_good"]
    assert not good["image_error"] and (good["width"], good["height"]) == (80, 64)


def test_a_run_with_bad_images_finishes_and_lists_each(tmp_path):
    rows = _image_rows(tmp_path)
    cfg = AnnotateConfig(out_dir=str(tmp_path / "out"))
    annotate_local(pa.Table.from_pylist(rows), cfg, cfg.out_dir)
    p = shard_paths(Path(cfg.out_dir), "train/part-00000")
    kept, rej = pq.read_table(p.kept), pq.read_table(p.rejected)
    assert kept.column("image_id").to_pylist() == ["a_good"]  # only readable images enter the corpus
    assert rej.num_rows == 5
    stats = annotation_statistics(kept, rej, json.loads(p.stats.read_text()))
    assert stats["images_rejected"] == {"boxes_outside_image": 1, "image_missing": 1, "image_truncated": 1,
                                        "image_undecodable": 1}
    assert not set(stats["rejections_per_rule"]) & set(IMAGE_RULES)


def test_failed_calls_leave_the_shard_incomplete_with_a_failures_table(tmp_path):
    good = _image_rows(tmp_path)[0]
    rows = [dict(good, image_id=f"img{i}", boxes=[dict(b, x2=b["x2"] - i) for b in good["boxes"]]) for i in range(12)]
    # the client's timeout is far above a normal answer's time even on a loaded machine: a retry that
    # overtakes its own slow first attempt at the server would otherwise be scored as the first attempt
    with flaky_vlm(timeout_sleep_s=2.5) as srv:
        cfg = AnnotateConfig(out_dir=str(tmp_path / "out"), vlm=dict(backend="openai", openai=dict(
            base_url=srv.url, max_retries=1, backoff_s=0.0, timeout_s=1.5)))
        annotate_local(pa.Table.from_pylist(rows), cfg, cfg.out_dir)
        n_failed = len(srv.failed_at_end_of(1))
    p = shard_paths(Path(cfg.out_dir), "train/part-00000")
    assert not p.done() and p.pending.exists()
    fails = read_failures(Path(cfg.out_dir))
    assert fails.num_rows == n_failed > 0
    assert set(fails.column("kind").to_pylist()) <= {"http_503", "malformed_response", "timeout"}
    assert set(fails.column("attempts").to_pylist()) == {2}


def test_consecutive_failures_trip_the_breaker_and_later_calls_are_not_made(tmp_path):
    good = _image_rows(tmp_path)[0]
    rows = [dict(good, image_id=f"img{i}", boxes=[dict(b, x2=b["x2"] - i) for b in good["boxes"]]) for i in range(6)]
    with flaky_vlm(mode="clean", dead_after=0) as srv:  # every request answers 503
        stage = PassesStage(dict(backend="openai", openai=dict(base_url=srv.url, max_retries=0, backoff_s=0.0)),
                            max_consecutive_failures=3)
        marked = MarkStage()(pa.Table.from_pylist(rows))
        out = [r for k in (0, 2, 4) for r in stage(marked.slice(k, 2)).to_pylist()]
        assert len(srv.log) == 4  # the second batch trips it (3 in a row); the third is never sent
    kinds = [json.loads(r["failure_json"])["kind"] for r in out]
    assert kinds == ["http_503"] * 4 + [UNAVAILABLE] * 2
    assert "3 VLM calls failed in a row (last: http_503" in json.loads(out[-1]["failure_json"])["message"]
    assert all(json.loads(r["failure_json"])["pass"] == "semantic" and r["resume_from"] == 0 for r in out)


def test_own_images_with_boxes_and_optional_categories(tmp_path):
    Image.new("RGB", (50, 40)).save(tmp_path / "one.jpg")
    lines = [{"image": "one.jpg", "boxes": [[1, 2, 20, 30], [10, 5, 45, 35]], "categories": ["man", "horse"]},
             {"image": "sub/two.png", "boxes": [{"x1": 0, "y1": 0, "x2": 5, "y2": 5}, [1, 1, 9, 9]]}]
    (tmp_path / "boxes.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    images = ImagesInput(images_dir=str(tmp_path), boxes_file=str(tmp_path / "boxes.jsonl"))
    t = read_boxes_file(images)
    assert t.column("image_id").to_pylist() == ["one", "sub/two"]
    b = t.column("boxes").to_pylist()
    assert b[0][0]["is_person"] and b[0][1]["category"] == "horse" and b[1][0]["category"] is None
    assert t.column("reference").to_pylist() == [[], []] and t.column("width").to_pylist() == [0, 0]
    plan = shard_plan(AnnotateConfig(images=images, shard_size=1))
    assert plan.column("shard").to_pylist() == ["train/part-00000", "train/part-00001"]
    (tmp_path / "bad.jsonl").write_text(json.dumps({"image": "x.jpg", "boxes": [[1, 2, 3]]}))
    with pytest.raises(ValueError, match="line 1: a box must be"):
        read_boxes_file(ImagesInput(images_dir=str(tmp_path), boxes_file=str(tmp_path / "bad.jsonl")))


def test_token_totals_equal_what_the_server_reported_and_none_are_invented():
    """Per pass, the prompt and completion tokens summed from the answers equal the sum of the
    ``usage`` numbers the server sent; a server that sends none reads as 'not reported'."""
    from pipelines.annotate_stages import VLM_PASSES, merge_counters
    from relate.annotation_stats import pass_usage

    with flaky_vlm(mode="clean") as srv:
        passes = PassesStage(dict(backend="openai", openai=dict(base_url=srv.url, backoff_s=0.0, max_concurrency=4)))
        rows = [dict(image_id=f"im{i}", uri="", image_png=f"img{i}".encode(), image_error=None, cands_json="[]",
                     counters_json="{}", run_vlm_json="{}", reference=[],
                     boxes=[dict(x1=0.0, y1=0.0, x2=9.0, y2=9.0, category=c, is_person=False, is_body_part=False)
                            for c in ("cup", "table", "dog")]) for i in range(6)]
        out = passes(pa.Table.from_pylist(rows)).to_pylist()
        sent = srv.usage_sent
    counters: dict = {}
    for r in out:
        counters = merge_counters(counters, json.loads(r["counters_json"]))
        assert json.loads(r["run_vlm_json"]) == json.loads(r["counters_json"])["vlm"]  # a fresh run: the same calls
    usage = pass_usage(counters)
    assert set(usage) == set(VLM_PASSES) and len(sent) == 18
    assert sum(u["prompt_tokens"] for u in usage.values()) == sum(p for _, _, p, _ in sent)
    assert sum(u["completion_tokens"] for u in usage.values()) == sum(c for *_, c in sent)
    assert all(u["calls"] == u["answers_with_tokens"] == 6 and u["latency_ms"]["p50"] > 0 and u["busy_s"] > 0
               for u in usage.values())

    with flaky_vlm(mode="clean", usage=False) as srv:
        passes = PassesStage(dict(backend="openai", openai=dict(base_url=srv.url, backoff_s=0.0)))
        out = passes(pa.Table.from_pylist(rows[:2])).to_pylist()
    counters = {}
    for r in out:
        counters = merge_counters(counters, json.loads(r["counters_json"]))
    for u in pass_usage(counters).values():
        assert u["prompt_tokens"] is None and u["completion_tokens"] is None
        assert u["answers_without_tokens"] == 2 and u["answers_with_tokens"] == 0


def test_latency_percentiles_from_the_histogram_are_within_its_resolution():
    from pipelines.vlm_calls import latency_bin
    from relate.annotation_stats import latency_percentiles

    rng = np.random.default_rng(3)
    lat = np.exp(rng.normal(np.log(0.3), 0.8, 5000))  # seconds, log-normal like real call latencies
    hist: dict = {}
    for x in lat:
        hist[latency_bin(float(x))] = hist.get(latency_bin(float(x)), 0) + 1
    got = latency_percentiles(hist)
    srt = np.sort(lat) * 1000
    for q in (0.5, 0.9, 0.99):
        exact = srt[int(np.ceil(q * len(srt))) - 1]  # nearest rank
        assert abs(got[f"p{q * 100:g}"] / exact - 1) < 0.023, (q, got, exact)
    assert latency_percentiles({}) == {"p50": None, "p90": None, "p99": None}


def test_throughput_and_cost_follow_gpus_held_times_wall_time():
    from relate.annotation_stats import throughput

    vlm = {"per_pass": {"semantic": {"calls": 100, "busy_s": 30.0}, "grow": {"calls": 100, "busy_s": 10.0}}}
    tp = throughput(vlm, images=100, wall_s=50.0, gpus_held=2.0, gpu_hour_usd=3.6)
    assert tp["images_per_s"] == 2.0 and tp["gpu_s"] == 100.0 and tp["gpu_s_per_image"] == 1.0
    assert tp["cost_usd"] == pytest.approx(0.1) and tp["cost_usd_per_1k_images"] == pytest.approx(1.0)
    assert tp["per_pass"]["semantic"]["gpu_s_per_image"] == 0.75 and tp["per_pass"]["grow"]["gpu_s_per_image"] == 0.25
    cpu = throughput(vlm, images=100, wall_s=50.0, gpus_held=0.0, gpu_hour_usd=3.6)
    assert cpu["gpu_s_per_image"] is None and cpu["cost_usd"] is None  # no GPU, no GPU bill invented


def test_vllm_engine_token_columns_are_counted_as_the_engine_reported_them():
    """The vLLM path: the engine stage's num_input_tokens / num_generated_tokens / time_taken_llm
    reach the statistics through our postprocess; a row the engine failed on counts no tokens."""
    from actors.vlm.vllm_data import _postprocess, vllm_outcomes
    from pipelines.annotate_stages import merge_counters, rows_to_table
    from relate.annotation_stats import pass_usage

    box = [dict(x1=0.0, y1=0.0, x2=9.0, y2=9.0, category=c, is_person=False, is_body_part=False) for c in ("cup", "dog")]
    base = dict(uri="", image_error=None, cands_json="[]", counters_json="{}", run_vlm_json="{}", boxes=box, prompt="p")
    answered = [_postprocess(dict(base, image_id=f"im{i}", generated_text='{"relations": []}', num_input_tokens=300 + i,
                                  num_generated_tokens=9 + i, time_taken_llm=0.25 * (i + 1), prompt_token_ids=[1, 2]))
                for i in range(3)]
    failed = dict(base, image_id="im9", __inference_error__="CUDA error: out of memory")
    rows = vllm_outcomes(answered + [failed])
    out = ParseStage("semantic")(rows_to_table(rows, pa.schema([]))).to_pylist()
    counters: dict = {}
    for r in out:
        counters = merge_counters(counters, json.loads(r["counters_json"]))
    u = pass_usage(counters)["semantic"]
    assert u["calls"] == 4 and u["answers_with_tokens"] == 3
    assert u["prompt_tokens"] == 300 + 301 + 302 and u["completion_tokens"] == 9 + 10 + 11
    assert 250 * 0.98 < u["latency_ms"]["p50"] < 500 * 1.03 and u["busy_s"] is None  # no batch timing in the engine path
    assert json.loads(out[3]["failure_json"])["kind"] == "engine_error"


def test_live_tally_counts_outstanding_failures_as_the_shard_files_list_them(tmp_path):
    good = _image_rows(tmp_path)[0]
    rows = [dict(good, image_id=f"img{i}", boxes=[dict(b, x2=b["x2"] - i) for b in good["boxes"]]) for i in range(8)]
    with flaky_vlm(mode="clean", dead_after=2) as srv:  # two answers, then 503 for every request
        stage = PassesStage(dict(backend="openai", openai=dict(base_url=srv.url, max_retries=0, backoff_s=0.0)),
                            max_consecutive_failures=4)
        gated = GateStage()(stage(MarkStage()(pa.Table.from_pylist(rows))))
    out = tmp_path / "out"
    tally = RunTally({"train/part-00000": len(rows)})
    assert tally.add(SpoolStage(str(out))(gated.slice(0, 5))) == []
    assert tally.add(SpoolStage(str(out))(gated.slice(5))) == ["train/part-00000"]
    line = format_vlm_line(tally.vlm())
    assert finish_shard(out, "train/part-00000", GateConfig(), len(rows)) is False
    on_disk: dict[str, int] = {}
    for kind in read_failures(out).column("kind").to_pylist():
        on_disk[kind] = on_disk.get(kind, 0) + 1
    # two semantic calls are answered (their images then fail in the grow pass), every other call fails
    assert tally.outstanding == on_disk and sum(on_disk.values()) == len(rows) > 0
    assert set(on_disk) == {"http_503", UNAVAILABLE}
    assert line.endswith(f"outstanding {len(rows)}") and f"http_503 {on_disk['http_503']}" in line
