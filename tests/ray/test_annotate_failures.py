"""Nothing lost at scale, on a local Ray instance against a real local OpenAI-compatible server
(tests/_flaky_vlm.py) that fails a share of calls: failures recorded and retried by a rerun, a
VLM that goes down stops the run with its work on disk, bad images become rejections."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from PIL import Image

from _flaky_vlm import flaky_vlm
from pipelines.annotate import AnnotateConfig, AnnotationStopped, annotate_local, main, shard_plan
from pipelines.annotate_shards import read_failures
from test_annotate import _world

pytestmark = pytest.mark.slow


def _cfg(inp: Path, out: Path, url: str, **kw) -> AnnotateConfig:
    base = dict(input_dir=str(inp), out_dir=str(out), splits=["train", "val"], shard_size=4, cpu_batch_size=4,
                duplicate_person_rate=0.2,
                vlm=dict(backend="openai", openai=dict(base_url=url, max_retries=1, backoff_s=0.01, timeout_s=1.5,
                                                       max_concurrency=4)),
                generate=dict(batch_size=4, resources=dict(num_cpus=0.5)))
    base.update(kw)
    return AnnotateConfig.model_validate(base)


@pytest.fixture(scope="module")
def world_and_clean_run(tmp_path_factory):
    """15 synthetic images, and their corpus from a clean server, annotated without Ray."""
    root = tmp_path_factory.mktemp("annotate_failures")
    inp = _world(root / "world", 15)
    with flaky_vlm(mode="clean") as clean:
        ref = _cfg(inp, root / "clean", clean.url)
        annotate_local(shard_plan(ref), ref, ref.out_dir)
    return inp, Path(ref.out_dir)


def _assert_same_corpus(ref: Path, out: Path) -> None:
    """Shard for shard: the same files, each with identical kept relations and rejections."""
    for kind in ("corpus", "rejections"):
        names = sorted(p.relative_to(ref).as_posix() for p in (ref / kind).rglob("*.parquet"))
        assert names and names == sorted(p.relative_to(out).as_posix() for p in (out / kind).rglob("*.parquet"))
        for name in names:
            assert pq.read_table(ref / name).equals(pq.read_table(out / name)), name
    assert not list((out / "pending").rglob("*.parquet")) and not list((out / "failures").rglob("*.parquet"))


def _assert_tokens_as_sent(vlm: dict, sent: list) -> None:
    """Token totals over the passes equal the sums of the usage the server sent with its answers."""
    per = vlm["per_pass"].values()
    assert sent and sum(d["answers_with_tokens"] for d in per) == len(sent)
    assert sum(d["prompt_tokens"] or 0 for d in per) == sum(p for _, _, p, _ in sent)
    assert sum(d["completion_tokens"] or 0 for d in per) == sum(c for *_, c in sent)
    assert all(d["latency_ms"]["p50"] and d["latency_ms"]["p99"] >= d["latency_ms"]["p50"] for d in per)


def test_flaky_server_failures_are_listed_and_a_rerun_retries_exactly_them(ray_session, world_and_clean_run, tmp_path,
                                                                            capsys):
    inp, ref = world_and_clean_run
    # the client's 1.5 s timeout (in _cfg) is far above a normal answer's time even on a loaded machine, and the
    # server stalls 2.5 s: a retry never overtakes its own slow first attempt at the server (as in the unit tests)
    with flaky_vlm(timeout_sleep_s=2.5) as srv:
        cfg = _cfg(inp, tmp_path / "flaky", srv.url)
        first = main(cfg)
        failed_keys = srv.failed_at_end_of(1)
        assert not first.complete and first.failures.num_rows == len(failed_keys) > 0
        fails = first.failures.to_pylist()
        assert {f["kind"] for f in fails} <= {"http_503", "malformed_response", "timeout"} and len({f["kind"] for f in fails}) >= 2
        assert all(f["attempts"] == 2 and f["message"] for f in fails)  # one call + the one retry allowed
        # every image is annotated (complete shard, or pending in an incomplete one) or listed with its failure
        out = Path(cfg.out_dir)
        annotated = {i for p in (out / "corpus").rglob("*.parquet") for i in pq.read_table(p).column("image_id").to_pylist()}
        pending = {i for p in (out / "pending").rglob("*.parquet") for i in pq.read_table(p).column("image_id").to_pylist()}
        assert {f["image_id"] for f in fails} <= pending and not annotated & pending
        assert annotated | pending == set(shard_plan(cfg).column("image_id").to_pylist())
        vlm = first.stats["vlm"]
        assert sum(vlm["outstanding_failures"].values()) == len(fails) and vlm["retries"] > 0
        # the live progress line counts them as they come back: its last line agrees with the summary
        live = [int(m) for m in re.findall(r"\| calls .*, outstanding (\d+) \|", capsys.readouterr().out)]
        assert live and live == sorted(live) and live[-1] == len(fails)
        assert sum(vlm["failed_calls"].values()) == len(fails) and vlm["calls"] >= 15
        saved = json.loads((out / "stats" / "annotation_stats.json").read_text())
        assert saved["vlm"] == vlm
        _assert_tokens_as_sent(vlm, [u for u in srv.usage_sent if u[0] == 1])
        _assert_tokens_as_sent(saved["throughput"]["vlm_this_run"], [u for u in srv.usage_sent if u[0] == 1])

        srv.phase, srv.hard = 2, False
        second = main(cfg)
        assert second.complete and second.failures.num_rows == 0
        assert second.shards_skipped == first.shards_written and second.shards_written == first.shards_incomplete
        again = srv.requested(2) & srv.requested(1)
        assert again == failed_keys  # the failed calls were retried, no call that had succeeded was repeated
        assert second.stats["vlm"]["outstanding_failures"] == {}
        assert sum(second.stats["vlm"]["failed_calls"].values()) == len(fails)  # the history stays counted
        _assert_tokens_as_sent(second.stats["vlm"], srv.usage_sent)  # over both runs
        _assert_tokens_as_sent(second.stats["throughput"]["vlm_this_run"], [u for u in srv.usage_sent if u[0] == 2])
        tp = second.stats["throughput"]
        assert tp["images"] == len({f["image_id"] for f in fails}) and tp["images_per_s"] > 0
        assert tp["gpus_held"] == 0 and tp["gpu_s_per_image"] is None  # a CPU run holds no GPU
        assert not srv.overflow
    _assert_same_corpus(ref, Path(cfg.out_dir))


def test_a_vlm_that_goes_down_stops_the_run_with_its_work_on_disk(ray_session, world_and_clean_run, tmp_path):
    inp, ref = world_and_clean_run
    with flaky_vlm(mode="clean", dead_after=18) as srv:  # 1.5 shards of 4 images x 3 passes, then 503 forever (many calls left)
        cfg = _cfg(inp, tmp_path / "down", srv.url, max_consecutive_failures=3)
        with pytest.raises(AnnotationStopped, match="3 VLM calls failed in a row.*http_503.*rerun the same command"):
            main(cfg)
        out = Path(cfg.out_dir)
        done = sorted((out / "stats" / "shards").glob("*.json"))
        assert done, "the shards finished before the VLM went down are on disk"
        for p in done:
            split, name = p.stem.split("-", 1)
            assert pq.read_table(out / "corpus" / split / f"{name}.parquet").equals(
                pq.read_table(ref / "corpus" / split / f"{name}.parquet"))
        assert read_failures(out).num_rows > 0
        srv.dead_after, srv.phase = None, 2
        resumed = main(cfg)
        assert resumed.complete and resumed.shards_skipped == len(done)
        assert not srv.requested(2) & {k for p, k, _, o in srv.log if p == 1 and o == "ok"}  # nothing redone
    _assert_same_corpus(ref, Path(cfg.out_dir))


def test_own_images_and_boxes_file_with_bad_images_finishes_with_each_rejected(ray_session, tmp_path):
    world = _world(tmp_path / "world", 6)
    folder = tmp_path / "photos"
    folder.mkdir()
    lines = []
    for i, png in enumerate(sorted((world / "images").glob("*.png"))[:4]):
        im = Image.open(png).convert("RGB")
        im.save(folder / f"img{i}.jpg", quality=92)
        lines.append({"image": f"img{i}.jpg", "boxes": [[4, 4, 40, 40], [30, 20, 90, 70], [10, 50, 60, 100]],
                      "categories": ["person", "bicycle", None]})
    w, h = Image.open(folder / "img1.jpg").size
    data = (folder / "img0.jpg").read_bytes()
    (folder / "corrupt.jpg").write_bytes(data[: len(data) // 3])  # a download cut short
    lines.append({"image": "corrupt.jpg", "boxes": [[4, 4, 40, 40], [30, 20, 90, 70]]})
    lines.append({"image": "gone.jpg", "boxes": [[4, 4, 40, 40], [30, 20, 90, 70]]})
    lines.append({"image": "img1.jpg", "image_id": "wrong_boxes", "boxes": [[4, 4, 40, 40], [w - 10, 20, w + 60, 70]]})
    (tmp_path / "boxes.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    with flaky_vlm(mode="clean") as srv:
        cfg = AnnotateConfig.model_validate(dict(
            images=dict(images_dir=str(folder), boxes_file=str(tmp_path / "boxes.jsonl")), out_dir=str(tmp_path / "out"),
            shard_size=4, cpu_batch_size=4, vlm=dict(backend="openai", openai=dict(base_url=srv.url, backoff_s=0.01)),
            generate=dict(batch_size=4, resources=dict(num_cpus=0.5))))
        res = main(cfg)
    assert res.complete and res.stats["images"] == 4 and res.stats["relations"] > 0
    assert res.stats["images_rejected"] == {"boxes_outside_image": 1, "image_missing": 1, "image_truncated": 1}
    out = Path(cfg.out_dir)
    rej = {r["image_id"]: r["rejected"] for p in (out / "rejections").rglob("*.parquet") for r in pq.read_table(p).to_pylist()}
    reasons = {i: (rs[0]["rule"], rs[0]["predicate"]) for i, rs in rej.items() if rs and rs[0]["subject"] == -1}
    assert set(reasons) == {"corrupt", "gone", "wrong_boxes"}
    assert reasons["gone"][0] == "image_missing" and "gone.jpg" in reasons["gone"][1]
    assert reasons["corrupt"][0] == "image_truncated" and "corrupt.jpg" in reasons["corrupt"][1]
    assert reasons["wrong_boxes"][0] == "boxes_outside_image" and "box 1" in reasons["wrong_boxes"][1]
    kept = [r for p in (out / "corpus").rglob("*.parquet") for r in pq.read_table(p).to_pylist()]
    assert sorted(r["image_id"] for r in kept) == ["img0", "img1", "img2", "img3"]
    assert all((r["width"], r["height"]) == Image.open(folder / f"{r['image_id']}.jpg").size for r in kept)  # from the files
    assert {r["source"] for r in kept} == {"user"} and kept[0]["boxes"][0]["is_person"]
