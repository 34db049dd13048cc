"""eval_jobs.judge without Ray: config errors, shard names, an in-process run, the plain rendering, a
misconfigured judge server."""

from __future__ import annotations

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from _flaky_vlm import flaky_vlm
from eval_jobs.judge import JudgeJobConfig, JudgeStopped, load_a5, main, shard_plan
from relate.judge.protocol import render_relation
from relate.judge.synthetic_systems import write_synthetic_systems


def _systems(**kw):
    return [{"name": "a", "predictions": "a.parquet", "threshold": 0.5, **kw}]


def test_config_errors_name_the_problem():
    with pytest.raises(ValidationError, match="threshold for system"):
        JudgeJobConfig(corpus="c", systems=[{"name": "a", "predictions": "a.parquet"}])
    with pytest.raises(ValidationError, match="may not contain"):
        JudgeJobConfig(corpus="c", systems=_systems(name="a|b"))
    with pytest.raises(ValidationError, match="needs a 'transformers' section"):
        JudgeJobConfig(corpus="c", systems=_systems(), judge={"backend": "transformers"})
    with pytest.raises(ValidationError, match="unique names"):
        JudgeJobConfig(corpus="c", systems=_systems() + _systems())
    with pytest.raises(ValidationError, match="graph.enabled"):
        JudgeJobConfig(corpus="c", systems=_systems(), graph={"enabled": False})
    with pytest.raises(ValidationError, match="identical votes"):
        JudgeJobConfig(corpus="c", systems=_systems(), graph={"votes": 3},
                       judge={"backend": "openai", "openai": {"sampling": {"temperature": 0.0}}})
    with pytest.raises(ValidationError, match="extra"):
        JudgeJobConfig(corpus="c", systems=_systems(), relation={"depth": 3})


def test_shard_names_are_deterministic_and_content_addressed():
    ids = [f"img{i}" for i in range(7)]
    plan = shard_plan(ids[::-1], 3)
    assert plan == shard_plan(ids, 3) and [len(c) for _, c in plan] == [3, 3, 1]
    assert plan[0][0].startswith("shard-00000-")
    assert shard_plan(ids[:6] + ["other"], 3)[2][0] != plan[2][0]


def test_plain_rendering_numbers_every_box():
    img = np.full((60, 80, 3), 200, np.uint8)
    boxes = np.array([[2, 2, 30, 30], [40, 10, 70, 50], [10, 35, 25, 55]], float)
    hi, p_hi = render_relation(img, boxes, {"subject": 0, "object": 1, "predicate": "left of"}, "highlighted")
    pl, p_pl = render_relation(img, boxes, {"subject": 0, "object": 1, "predicate": "left of"}, "plain")
    assert "red" in p_hi and "red" not in p_pl and '"left of"' in p_pl and "object 1" in p_pl
    assert not np.array_equal(hi, pl) and (pl[35:55, 10:25] != 200).any()  # the third box is drawn only in plain
    with pytest.raises(ValueError, match="rendering"):
        render_relation(img, boxes, {"subject": 0, "object": 1, "predicate": "x"}, "fancy")


@pytest.fixture(scope="module")
def small_world(tmp_path_factory):
    from pipelines.synthetic import SceneStage
    from relate.data.synthetic import SyntheticConfig

    root = tmp_path_factory.mktemp("world")
    (root / "images").mkdir()
    table = SceneStage(SyntheticConfig(seed=2, min_size=56, max_size=64, max_objects=4),
                       str(root / "images"))({"id": np.arange(12)})
    for split in ("train", "val", "test"):
        (root / "corpus" / split).mkdir(parents=True)
        pq.write_table(table.filter(pc.equal(table["split"], split)), root / "corpus" / split / "p.parquet")
    return root, write_synthetic_systems(str(root), str(root / "sys"), split="train")


def test_in_process_run_and_missing_predictions(small_world, tmp_path):
    root, paths = small_world
    systems = [{"name": "noisy", "predictions": paths["noisy_truth"], "threshold": 0.5},
               {"name": "freq", "predictions": paths["frequency"], "threshold": 0.05}]
    cfg = JudgeJobConfig(out_dir=str(tmp_path / "r"), corpus=str(root), split="train", max_images=3,
                         images_per_shard=2, use_ray=False, systems=systems, judge={"scripted": {"unparseable": 0.3}},
                         a5_requires_certification=False, relation={"depths": ["matched"]})
    res = main(cfg)
    assert res["shards"]["planned"] == 2 and res["calls"]["unparseable"] > 0  # counted, never guessed
    block = res["relation"]["depths"]["matched"]
    # asserted calls are counted per system; the control line also counts unparseable corruption calls
    asserted_bad = sum(s["unparseable"] for s in block["systems"].values())
    assert 0 < asserted_bad <= block["controls"]["unparseable"] <= res["calls"]["unparseable"]
    assert res["a5"]["noisy"] == pytest.approx(block["systems"]["noisy"]["share_of_annotation"])
    assert load_a5(tmp_path / "r", "noisy") == pytest.approx(res["a5"]["noisy"])
    with pytest.raises(KeyError, match="not in judge run"):
        load_a5(tmp_path / "r", "nobody")
    changed = cfg.model_copy(update={"judge": cfg.judge.model_copy(update={"scripted": cfg.judge.scripted.model_copy(
        update={"accept_true": 0.5})})})
    with pytest.raises(ValueError, match="different judge config"):
        main(changed)
    assert main(cfg.model_copy(update={"use_ray": False}))["shards"]["ran"] == 0  # same protocol: resumes
    bad = cfg.model_copy(update={"systems": [cfg.systems[0].model_copy(update={"predictions": str(tmp_path / "nope.parquet")})]})
    with pytest.raises(FileNotFoundError, match="nope.parquet"):
        main(bad.model_copy(update={"out_dir": str(tmp_path / "r2")}))


def test_a_judge_server_that_refuses_every_call_stops_the_run_naming_the_cause(small_world, tmp_path):
    root, paths = small_world
    with flaky_vlm(mode="clean") as srv:  # a wrong route answers 404: a wrong base_url, no call can succeed
        cfg = JudgeJobConfig(out_dir=str(tmp_path / "r"), corpus=str(root), split="train", max_images=2,
                             use_ray=False, a5_requires_certification=False, graph={"enabled": False},
                             systems=[{"name": "noisy", "predictions": paths["noisy_truth"], "threshold": 0.5}],
                             judge={"backend": "openai", "openai": {"base_url": srv.url + "/wrong", "backoff_s": 0.0}})
        with pytest.raises(JudgeStopped, match="HTTP 404.*rerun the same command"):
            main(cfg)
        assert not srv.log  # the requests went to the wrong route: nothing was judged
    assert list((tmp_path / "r" / "failures").glob("*.parquet")) and not (tmp_path / "r" / "result.json").exists()


def test_a_rerun_killed_after_writing_an_audit_neither_loses_nor_repeats_a_call(small_world, tmp_path):
    """Failed judge calls, then a rerun killed between writing a shard's audit and dropping its
    pending state and failures: the next run keeps the audit, drops the stale state, asks nothing."""
    import shutil

    from eval_jobs.judge import load_audit
    from pipelines.annotate_shards import read_failures

    root, paths = small_world
    with flaky_vlm(timeout_sleep_s=2.5) as srv:
        cfg = JudgeJobConfig(out_dir=str(tmp_path / "r"), corpus=str(root), split="train", max_images=2,
                             use_ray=False, a5_requires_certification=False, graph={"enabled": False},
                             systems=[{"name": "noisy", "predictions": paths["noisy_truth"], "threshold": 0.5}],
                             judge={"backend": "openai", "openai": {"base_url": srv.url, "max_retries": 1,
                                                                    "backoff_s": 0.0, "timeout_s": 1.5}})
        out = tmp_path / "r"
        first = main(cfg)
        assert not first["complete"] and read_failures(out).num_rows == first["failures"] > 0
        with pytest.raises(FileNotFoundError, match="incomplete.*rerun the judge"):
            load_a5(out, "noisy")
        shutil.copytree(out / "pending", tmp_path / "pending")
        shutil.copytree(out / "failures", tmp_path / "failures")
        srv.phase, srv.hard = 2, False
        second = main(cfg)
        assert second["complete"] and second["run"]["calls_made"] == first["failures"]
        audit = load_audit(out)
        for name in ("pending", "failures"):  # what the killed run had not dropped yet
            shutil.rmtree(out / name)
            shutil.copytree(tmp_path / name, out / name)
        srv.phase = 3
        third = main(cfg)
        assert third["complete"] and third["shards"]["ran"] == 0 and third["run"]["calls_made"] == 0
        assert not srv.requested(3) and read_failures(out).num_rows == 0
        assert not list((out / "pending").glob("*.parquet")) and load_audit(out).equals(audit)
        assert third["a5"] == second["a5"] and third["calls"] == second["calls"]


def test_a_judge_server_that_goes_down_stops_the_run_and_a_rerun_asks_only_the_calls_not_answered(small_world, tmp_path):
    """The server answers 4 requests, then 503s everything: three failed calls in a row trip the
    breaker, the calls after it are recorded without being made, and once the server is back a
    rerun asks exactly the unanswered calls and ends where a run against a healthy server ends."""
    from eval_jobs.judge import load_audit
    from pipelines.annotate_shards import read_failures

    root, paths = small_world
    common = dict(corpus=str(root), split="train", max_images=4, images_per_shard=1, use_ray=False,
                  a5_requires_certification=False, graph={"enabled": False},
                  systems=[{"name": "noisy", "predictions": paths["noisy_truth"], "threshold": 0.5}])
    with flaky_vlm(mode="clean") as healthy:
        want = main(JudgeJobConfig(out_dir=str(tmp_path / "healthy"), **common,
                                   judge={"backend": "openai", "openai": {"base_url": healthy.url, "backoff_s": 0.0}}))
    total = want["run"]["calls_made"]
    answered, limit, tries = 4, 3, 2
    assert total - answered > 3 * limit, "too few calls for the breaker to matter"
    with flaky_vlm(mode="clean", dead_after=answered) as srv:
        out = tmp_path / "r"
        cfg = JudgeJobConfig(out_dir=str(out), **common, max_consecutive_failures=limit,
                             judge={"backend": "openai", "openai": {"base_url": srv.url, "backoff_s": 0.0,
                                                                    "max_retries": tries - 1}})
        with pytest.raises(JudgeStopped, match=f"{limit} VLM calls failed in a row .*http_503.*rerun the same command"):
            main(cfg)
        # calls are asked in chunks of `limit`: the breaker trips within the second chunk after the outage at the latest
        assert len(srv.log) - answered <= 2 * limit * tries
        kinds = read_failures(out).column("kind").to_pylist()
        assert len(kinds) == total - answered and not (out / "result.json").exists()
        assert limit <= kinds.count("http_503") <= 2 * limit and kinds.count("vlm_unavailable") == total - answered - kinds.count("http_503")
        srv.dead_after, srv.phase = None, 2
        again = main(cfg)
        assert again["complete"] and again["run"]["calls_made"] == total - answered
        assert sum(phase == 2 for phase, *_ in srv.log) == total - answered  # one request per unanswered call
    cols = ["call_id", "raw_answer", "verdict"]
    assert load_audit(out).select(cols).equals(load_audit(tmp_path / "healthy").select(cols))
    assert again["a5"] == want["a5"] and again["calls"] == want["calls"]
