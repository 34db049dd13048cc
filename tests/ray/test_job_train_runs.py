"""The train job submitted three times through the job API against a local head with its
dashboard, as the README's commands do: the first two submissions (same config, which fixes
`run.name`) train two runs in two folders under RELATE_ROOT; the third, with `--resume <first>`,
continues the first run from its last checkpoint and says so. Every run is listed by the
dashboard's Train state API (`RAY_TRAIN_ENABLE_STATE_TRACKING=1`, set by cluster/runtime_env.yaml).

The corpus sits at the config's default `runs/synthetic` under the root and checkpoints go to the
default `runs/ray_train`: relative paths, resolved against RELATE_ROOT inside the job.
"""

from __future__ import annotations

import json
import re
import sys
import urllib.request

import pytest

from _ray_local_cluster import REPO, head_with_workers, project_runtime_env, wait_job

pytestmark = pytest.mark.slow

TINY = ["run.name=fixed", "model.backbone.img_size=32", "model.backbone.depth=2", "model.backbone.taps=[-2, -1]",
        "model.dim=32", "model.scene_grid=2", "model.sampler.geometry_keep=24", "model.sampler.learned_keep=12",
        "data.rungs=[1.0]", "optim.batch_size=4", "optim.max_steps=2", "optim.warmup_steps=2",
        "run.checkpoint_every=2", "run.val_images=8", "run.evaluate_test=false", "run.calibrate=false",
        "run.log_every=1", "run.num_workers=1", "run.worker.num_cpus=0.5", "data.source_scopes.synthetic=observed"]


@pytest.fixture
def cluster():
    with head_with_workers({"w1": (2, {})}) as c:
        yield c


def _submit(cluster, root, extra: list[str]):
    from ray.job_submission import JobStatus

    from scripts.submit_job import build_submission

    args = ["--config", "train_jobs/configs/cpu_small.yaml"] + [a for o in TINY for a in ("--set", o)] + extra
    sub = build_submission("train_jobs.train_relation", args, python=sys.executable, repo=REPO, root=str(root))
    client = cluster.job_client()
    job = client.submit_job(entrypoint=sub.entrypoint, submission_id=sub.submission_id, metadata=sub.metadata,
                            runtime_env=project_runtime_env(RELATE_ROOT=str(root)))
    final, seen = wait_job(client, job, timeout=900)
    logs = client.get_job_logs(job)
    assert final == JobStatus.SUCCEEDED.value, f"statuses {seen}\n{logs[-4000:]}"
    assert client.get_job_info(job).metadata["job_name"] == sub.metadata["job_name"]
    return logs


@pytest.mark.timeout(2400)
def test_resubmitting_trains_a_new_run_and_resume_continues_the_old_one(cluster, tmp_path):
    from relate.data.synthetic import SyntheticConfig
    from relate.data.synthetic_corpus import write_corpus

    root = tmp_path / "shared"
    world = SyntheticConfig(num_scenes=24, min_size=64, max_size=96, max_objects=6)
    write_corpus(root / "runs" / "synthetic", world, lambda i: "val" if i % 4 == 0 else "train")
    storage = root / "runs" / "ray_train"

    runs = []
    for _ in range(2):
        logs = _submit(cluster, root, [])
        m = re.search(rf"new run (fixed-\d{{8}}-\d{{6}}-[0-9a-f]{{6}}): {re.escape(str(storage))}/", logs)
        assert m, logs[-4000:]
        runs.append(m.group(1))
        assert (storage / m.group(1) / "checkpoint_manager_snapshot.json").is_file()
        assert "Reporting training result" not in logs  # Ray Train's per-report line is off
    assert runs[0] != runs[1]

    logs = _submit(cluster, root, ["--set", "optim.max_steps=4", "--resume", runs[0]])
    assert f"resuming run {runs[0]} from step 2 (checkpoint {storage / runs[0]}/checkpoint_" in logs, logs[-4000:]
    assert re.search(r"step 4/4 loss", logs) and not re.search(r"step [12]/4 loss", logs), logs[-4000:]
    assert "resumed from step 2/4" in (storage / runs[0] / "progress.log").read_text()

    with urllib.request.urlopen(f"{cluster.dashboard_url}/api/train/v2/runs/v1", timeout=30) as resp:
        listed = json.loads(resp.read())["train_runs"]
    names = [r["name"] for r in listed]
    assert set(runs) <= set(names), names  # the dashboard's Train view lists each run by its folder name
