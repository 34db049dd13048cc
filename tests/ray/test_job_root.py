"""Jobs submitted as an operator would (`ray job submit`'s API against a local head with its
dashboard, the working tree uploaded as a runtime_env working_dir) write under the configured
root, and refuse a relative path when none is set.

One head (no CPUs, dashboard on a free port) plus one worker, both in their own temp dirs and
process groups (tests/ray/_ray_local_cluster.py). The synthetic world is submitted with
`out_dir=runs/syn` (relative) and RELATE_ROOT in the runtime_env: its corpus lands under the root,
not in Ray's `_ray_pkg_<hash>` copy of the tree, and its log carries our scene counts and Ray
Data's own progress lines. The same submission without a root fails, naming the field and
RELATE_ROOT. The Jobs page's Name column (`metadata.job_name`) is the run name.
"""

from __future__ import annotations

import re
import sys

import pytest

from _ray_local_cluster import REPO, head_with_workers, project_runtime_env, wait_job

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster():
    with head_with_workers({"w1": (2, {})}) as c:
        yield c


def test_outputs_go_under_the_root_and_a_relative_path_without_one_is_refused(cluster, tmp_path):
    from ray.job_submission import JobStatus

    from relate.data.corpus import read_corpus
    from scripts.submit_job import build_submission

    root = tmp_path / "shared"
    args = ["--set", "num_scenes=12", "--set", "blocks=3", "--set", "num_cpus=0.5", "--set", "out_dir=runs/syn"]
    sub = build_submission("pipelines.synthetic", args, python=sys.executable, repo=REPO, root=str(root))
    assert sub.metadata["job_name"] == "synthetic-syn"
    client = cluster.job_client()
    env = project_runtime_env(RELATE_ROOT=str(root), RAY_DATA_DISABLE_PROGRESS_BARS="0",
                              RAY_DATA_NON_TTY_PROGRESS_LOG_INTERVAL="1")
    job = client.submit_job(entrypoint=sub.entrypoint, submission_id=sub.submission_id, metadata=sub.metadata,
                            runtime_env=env)
    final, seen = wait_job(client, job, timeout=420)
    logs = client.get_job_logs(job)
    assert final == JobStatus.SUCCEEDED.value, f"statuses {seen}\n{logs[-3000:]}"

    # the corpus is under the root, and nothing was written into the uploaded copy of the tree
    assert read_corpus(root / "runs" / "syn").num_rows == 12
    assert f"synthetic corpus ({root / 'runs' / 'syn'})" in logs and "_ray_pkg_" not in logs.split("synthetic corpus")[1]
    # our progress lines and Ray Data's (logged, not drawn: the job's stdout is not a terminal)
    done = [int(k) for k in re.findall(r"\[synthetic-syn\] scenes (\d+)/12 \(\d+%\) elapsed \S+ eta \S+", logs)]
    assert done and done[-1] == 12, logs[-3000:]
    assert "======= Running Dataset:" in logs, logs[-3000:]
    # the Jobs page lists the run name in its Name column
    info = client.get_job_info(job)
    assert info.metadata["job_name"] == "synthetic-syn" and info.runtime_env["working_dir"].startswith("gcs://")

    # the same job with no root: refused, saying what to set, before anything is written
    bare = project_runtime_env()
    assert "RELATE_ROOT" not in bare["env_vars"]
    refused = client.submit_job(entrypoint=sub.entrypoint, metadata={"job_name": "synthetic-syn-noroot"},
                                runtime_env=bare)
    final, _ = wait_job(client, refused, timeout=240)
    logs = client.get_job_logs(refused)
    assert final == JobStatus.FAILED.value
    assert "out_dir" in logs and "'runs/syn' is relative" in logs and "Set RELATE_ROOT" in logs, logs[-3000:]
    assert "_ray_pkg_" in logs  # the message says where the path would have gone
