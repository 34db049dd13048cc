"""relate.jobinfo and scripts/submit_job.py: run names, submission ids, metadata and progress lines."""

from __future__ import annotations

import json
import shlex
from datetime import datetime, timezone
from pathlib import Path

import pytest

from relate.jobinfo import (Progress, config_label, eta_seconds, format_seconds, job_metadata, run_name,
                            submission_id)

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("job,label,want", [
    ("annotate", "/mnt/shared/annotated/", "annotate-annotated"),
    ("train", "s3://bucket/runs/released", "train-released"),
    ("ovsgg", "runs/ovsgg", "ovsgg"),  # no repeated job name
    ("probe", "runs/my probe (v2)", "probe-my-probe-v2"),
    ("judge", None, "judge"),
])
def test_run_name(job, label, want):
    assert run_name(job, label) == want


def test_run_name_is_bounded_and_rejects_empty_jobs():
    assert len(run_name("annotate", "x" * 200)) <= 64
    with pytest.raises(ValueError, match="no usable characters"):
        run_name("///")


def test_submission_id_is_utc_and_sortable():
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    assert submission_id("annotate-annotated", when) == "annotate-annotated-20260102-030405"
    assert submission_id("x") < submission_id("x", datetime(2999, 1, 1, tzinfo=timezone.utc))


def test_metadata_is_all_strings_with_the_commit():
    meta = job_metadata("pipelines.annotate", "pipelines/configs/annotate_gpu.yaml", ["a=1", "b=2"], repo=REPO,
                        user="ci", run="annotate-x")
    assert all(isinstance(v, str) for v in meta.values())
    assert meta["overrides"] == "a=1 b=2" and meta["user"] == "ci" and meta["run"] == "annotate-x"
    assert meta["git_commit"] != "unknown" and len(meta["git_commit"].split("+")[0]) == 12  # this checkout
    assert job_metadata("j", repo="/")["git_commit"] == "unknown"  # not a git checkout
    with pytest.raises(TypeError, match="strings"):
        job_metadata("j", repo=REPO, shards=3)


def test_eta_and_seconds_format():
    assert eta_seconds(0, 10, 5.0) is None
    assert eta_seconds(2, 10, 4.0) == pytest.approx(16.0)
    assert [format_seconds(s) for s in (None, 4.4, 75, 3725)] == ["?", "4s", "1m15s", "1h02m"]


def test_progress_lines_count_and_estimate():
    t = [100.0]
    lines: list[str] = []
    p = Progress("annotate-x", "shards", 4, emit=lines.append, clock=lambda: t[0])
    t[0] = 110.0
    p.update()
    t[0] = 120.0
    p.update(2)
    assert lines == ["[annotate-x] shards 1/4 (25%) elapsed 10s eta 30s",
                     "[annotate-x] shards 3/4 (75%) elapsed 20s eta 7s"]
    with pytest.raises(ValueError, match="5 done of 4"):
        p.update(2)


def test_progress_throttles_but_always_prints_the_last_unit():
    t = [0.0]
    lines: list[str] = []
    p = Progress("r", "cells", 10, min_interval_s=5.0, emit=lines.append, clock=lambda: t[0])
    for _ in range(10):
        t[0] += 1.0
        p.update()
    assert [ln.split()[2] for ln in lines] == ["1/10", "6/10", "10/10"]


def test_config_label_prefers_run_name_then_out_dir():
    from pipelines.annotate import AnnotateConfig
    from train_jobs.train_relation import TrainRelationConfig

    assert config_label(TrainRelationConfig()) == "relation"
    assert config_label(AnnotateConfig(out_dir="/x/annotated")) == "/x/annotated"
    assert config_label(object()) is None


def test_submit_helper_validates_names_and_prints_the_command():
    from scripts.submit_job import build_submission, main, ray_job_submit_argv

    args = ["--config", "pipelines/configs/annotate_gpu.yaml", "--set", "out_dir=/mnt/shared/annotated"]
    sub = build_submission("pipelines.annotate", args)
    assert sub.submission_id.startswith("annotate-annotated-") and len(sub.submission_id) == len("annotate-annotated-") + 15
    assert sub.entrypoint == "python -m pipelines.annotate " + shlex.join(args)
    assert sub.metadata["job"] == "pipelines.annotate" and sub.metadata["config"] == "pipelines/configs/annotate_gpu.yaml"
    assert sub.metadata["overrides"] == "out_dir=/mnt/shared/annotated" and sub.metadata["run"] == "annotate-annotated"
    argv = ray_job_submit_argv(sub, address="http://127.0.0.1:8265")
    assert argv[:5] == ["ray", "job", "submit", "--address", "http://127.0.0.1:8265"]
    assert json.loads(argv[argv.index("--metadata-json") + 1]) == sub.metadata
    assert argv[argv.index("--runtime-env") + 1] == "cluster/runtime_env.yaml"
    assert argv[argv.index("--") + 1:] == ["python", "-m", "pipelines.annotate", *args]
    assert sub.metadata["job_name"] == "annotate-annotated"  # the dashboard's Name column
    line = main(["--runtime-env", "", "--root", "/mnt/nfs", "--", "train_jobs.train_relation",
                 "--config", "train_jobs/configs/released.yaml"])
    assert "--submission-id train-released-" in line and "--runtime-env " not in line
    assert json.loads(shlex.split(line)[shlex.split(line).index("--runtime-env-json") + 1]) == {
        "env_vars": {"RELATE_ROOT": "/mnt/nfs"}}


def test_submit_helper_fails_before_submitting_a_bad_job():
    from relate.config import ConfigError
    from scripts.submit_job import build_submission

    with pytest.raises(ConfigError, match="no_such_field"):
        build_submission("pipelines.annotate", ["--set", "no_such_field=1"])
    with pytest.raises(ValueError, match="valid:"):
        build_submission("pipelines.nope", [])
    with pytest.raises(ValueError, match="--config FILE and --set"):
        build_submission("pipelines.annotate", ["--confg", "x.yaml"])


def test_git_commit_is_dirty_when_the_uploaded_tree_differs(tmp_path):
    """An untracked file is uploaded with the working dir (unless .gitignore lists it): dirty."""
    import subprocess

    from relate.jobinfo import git_commit

    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    git("init", "-q")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "t")
    (tmp_path / ".gitignore").write_text("runs/\n")
    (tmp_path / "a.py").write_text("x = 1\n")
    git("add", ".gitignore", "a.py")
    git("commit", "-q", "-m", "one")
    clean = git_commit(tmp_path)
    assert clean and "+" not in clean and len(clean) == 12
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "out.parquet").write_text("ignored, never uploaded")
    assert git_commit(tmp_path) == clean
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "new.py").write_text("y = 2\n")  # untracked, not ignored: uploaded
    assert git_commit(tmp_path) == clean + "+dirty"
    (tmp_path / "notes" / "new.py").unlink()
    assert git_commit(tmp_path) == clean
    (tmp_path / "a.py").write_text("x = 2\n")
    assert git_commit(tmp_path) == clean + "+dirty"
