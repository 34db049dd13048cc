"""Training runs: a new run gets its own folder, resuming is explicit and says from which step, and
a finished or existing run is never silently returned (train_jobs.run_files, train_relation.main)."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from pathlib import Path

import pytest

from train_jobs.run_files import RunError, latest_step, new_run_name, plan_run, refuse_finished

REPO = Path(__file__).resolve().parents[2]


def _snapshot(folder: Path, step: int, ckpt: str = "checkpoint_2026-12-01_04-30-00.000000") -> None:
    """What Ray Train's checkpoint manager writes beside a run's checkpoints (the fields we read)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ckpt).mkdir()
    (folder / "checkpoint_manager_snapshot.json").write_text(json.dumps({
        "checkpoint_results": [{"checkpoint_dir_name": ckpt, "metrics": {"step": step}}],
        "latest_checkpoint_result": {"checkpoint_dir_name": ckpt, "metrics": {"step": step, "loss/total": 1.0}},
        "current_report_index": step}))


def test_new_run_names_are_unique_and_sortable():
    when = datetime(2026, 12, 1, 4, 30, 5, tzinfo=timezone.utc)
    assert new_run_name("cpu_small", when, "3fa9c1") == "cpu_small-20261201-043005-3fa9c1"
    names = {new_run_name("cpu_small", when) for _ in range(50)}
    assert len(names) == 50 and all(re.fullmatch(r"cpu_small-20261201-043005-[0-9a-f]{6}", n) for n in names)


def test_a_new_run_never_lands_in_an_earlier_runs_folder(tmp_path):
    _snapshot(tmp_path / "cpu_small", step=150)
    fresh = plan_run(str(tmp_path), "cpu_small")  # the config fixes run.name; the folder is new anyway
    assert fresh.name.startswith("cpu_small-") and fresh.step is None and not (tmp_path / fresh.name).exists()
    assert fresh.folder == str(tmp_path / fresh.name)
    with pytest.raises(RunError) as err:  # the name as given, no resume: an error naming folder and flag
        plan_run(str(tmp_path), "cpu_small", unique=False)
    msg = str(err.value)
    assert f"run folder {tmp_path / 'cpu_small'} already exists" in msg and "--resume cpu_small" in msg
    (tmp_path / "empty").mkdir()  # a folder without checkpoints is taken too
    with pytest.raises(RunError, match="--resume empty"):
        plan_run(str(tmp_path), "empty", unique=False)
    assert plan_run(str(tmp_path), "other", unique=False).name == "other"


def test_resume_is_explicit_and_says_from_which_step(tmp_path):
    _snapshot(tmp_path / "r1", step=100)
    state = plan_run(str(tmp_path), "r1", resume=True)
    assert (state.name, state.step) == ("r1", 100)
    assert state.checkpoint == str(tmp_path / "r1" / "checkpoint_2026-12-01_04-30-00.000000")
    assert latest_step(str(tmp_path), "r1") == 100 and latest_step(str(tmp_path), "nope") == 0
    with pytest.raises(RunError, match=r"cannot resume run 'nope': there is no such folder"):
        plan_run(str(tmp_path), "nope", resume=True)
    (tmp_path / "started").mkdir()
    with pytest.raises(RunError, match=r"cannot resume run 'started': it holds no checkpoint"):
        plan_run(str(tmp_path), "started", resume=True)
    refuse_finished(str(tmp_path), "r1", total=150)  # unfinished: fine
    with pytest.raises(RunError, match=r"run 'r1' already finished: its latest checkpoint is at step 100 of 100"):
        refuse_finished(str(tmp_path), "r1", total=100)


def test_resume_flag_and_main_use_the_planned_folder(tmp_path, monkeypatch, capsys):
    import train_jobs.train_relation as job

    cfg = job.parse_args(["--config", str(REPO / "train_jobs/configs/cpu_small.yaml"), "--resume", "r1",
                          "--set", f"run.storage_path={tmp_path}"])
    assert (cfg.run.name, cfg.run.resume, cfg.run.storage_path) == ("r1", True, str(tmp_path))
    assert job.parse_args([]).run.resume is False

    seen = []

    class _Fit:
        checkpoint, metrics = None, {}

    def fake_trainer(c):
        seen.append(c)
        return type("T", (), {"fit": lambda self: _Fit()})()

    monkeypatch.setattr(job, "build_trainer", fake_trainer)
    monkeypatch.setattr("ray.is_initialized", lambda: True)
    corpus = tmp_path / "corpus_root"
    for split in ("train", "val"):  # main checks the inputs exist (the loop validates at its end); the trainer is faked
        (corpus / "corpus" / split).mkdir(parents=True)
        (corpus / "corpus" / split / "part-00000.parquet").touch()
    base = ["--config", str(REPO / "train_jobs/configs/cpu_small.yaml"), "--set", f"run.storage_path={tmp_path}",
            "--set", f"data.corpus_root={corpus}", "--set", "run.calibrate=false", "--set", "run.evaluate_test=false"]
    first, second = job.main(job.parse_args(base)), job.main(job.parse_args(base))
    assert first.run != second.run and first.run.startswith("cpu_small-") and second.run.startswith("cpu_small-")
    assert [c.run.name for c in seen] == [first.run, second.run] and not any(c.run.unique_name for c in seen)
    assert f"new run {first.run}: {tmp_path / first.run}" in capsys.readouterr().out
    _snapshot(tmp_path / first.run, step=7)
    res = job.main(job.parse_args(base + ["--resume", first.run]))
    assert res.run == first.run and seen[-1].run.resume and seen[-1].run.name == first.run
    assert f"resuming run {first.run} from step 7 (checkpoint {tmp_path / first.run}/checkpoint_" in capsys.readouterr().out


def test_ray_trains_per_report_line_is_dropped_unless_asked():
    """The logger is Ray Train's own (its module's), and the line is the one it logs per report."""
    import logging

    from ray.train.v2._internal.execution import context
    from train_jobs.relation_worker import quiet_reports

    got: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: got.append(record.getMessage())
    context.logger.addHandler(handler)
    level = context.logger.level
    context.logger.setLevel(logging.INFO)
    try:
        quiet_reports()
        context.logger.info("Reporting training result 3: TrainingReport(metrics={'step': 3}) from rank 0")
        context.logger.info("something else")
        assert got == ["something else"]
        quiet_reports(keep=True)
        context.logger.info("Reporting training result 4: TrainingReport(metrics={'step': 4}) from rank 1")
        assert got[-1].startswith("Reporting training result 4")
    finally:
        quiet_reports(keep=True)
        context.logger.removeHandler(handler)
        context.logger.setLevel(level)


def test_metrics_are_reported_to_ray_train_at_log_validation_and_checkpoint_steps_only():
    """ray.train.report is a barrier across workers; reporting every step halved the step rate."""
    from train_jobs.relation_config import RunSettings
    from train_jobs.relation_worker import reports_at

    run = RunSettings(log_every=20, val_every=50, checkpoint_every=30)
    assert [s for s in range(1, 101) if reports_at(s, 100, run)] == [20, 30, 40, 50, 60, 80, 90, 100]
    assert [s for s in range(1, 41) if reports_at(s, 40, RunSettings(log_every=7, checkpoint_every=40))] == [7, 14, 21, 28, 35, 40]
