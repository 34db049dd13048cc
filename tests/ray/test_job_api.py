"""The job submission API (what `ray job submit` uses, served by the dashboard) end to end.

A local head with the dashboard plus one worker node; the synthetic-corpus pipeline is
submitted through JobSubmissionClient with a name (submission id), metadata and the project's
runtime_env (cluster/runtime_env.yaml minus pip), and followed through its statuses and logs
to completion, as a user would follow it on the dashboard's Jobs page.
"""

from __future__ import annotations

import asyncio
import sys
import uuid

import pytest

from _ray_local_cluster import LocalCluster, project_runtime_env, wait_job

pytestmark = pytest.mark.slow

NUM_SCENES = 12


async def _tail(client, job_id: str, timeout: float) -> list[str]:
    chunks: list[str] = []

    async def run() -> None:
        async for chunk in client.tail_job_logs(job_id):
            chunks.append(chunk)

    await asyncio.wait_for(run(), timeout)
    return chunks


@pytest.fixture
def cluster():
    c = LocalCluster(head_cpus=0, dashboard=True)
    try:
        c.start_head()
        c.add_worker("w1", num_cpus=1, resources={"annotator": 1})
        c.wait_for_nodes(timeout=120)
        yield c
    finally:
        c.close()


def test_submit_follow_and_read_back(cluster, tmp_path):
    from ray.job_submission import JobStatus

    from relate.data.corpus import read_corpus

    client = cluster.job_client()
    out_dir = tmp_path / "synthetic"
    job_id = f"synthetic-{uuid.uuid4().hex[:8]}"
    metadata = {"project": "relate", "job": "pipelines.synthetic", "num_scenes": str(NUM_SCENES)}
    entry = (f"{sys.executable} -m pipelines.synthetic --set num_scenes={NUM_SCENES} --set blocks=3 "
             f"--set num_cpus=0.5 --set min_size=64 --set max_size=96 --set out_dir={out_dir}")
    returned = client.submit_job(entrypoint=entry, submission_id=job_id, metadata=metadata,
                                 runtime_env=project_runtime_env())
    assert returned == job_id

    # Follow the log stream while polling the status, like `ray job submit` does.
    log_chunks = asyncio.run(_tail(client, job_id, timeout=300))
    final, seen = wait_job(client, job_id, timeout=30)
    logs = client.get_job_logs(job_id)
    assert final == JobStatus.SUCCEEDED.value, f"job ended {final}; statuses {seen}\n{logs[-3000:]}"

    # The streamed log is the stored log, and it carries the pipeline's own summary.
    streamed = "".join(log_chunks)
    assert "synthetic corpus" in streamed and "synthetic corpus" in logs

    # Name and metadata are what the dashboard shows; the job is listed with them.
    info = client.get_job_info(job_id)
    assert info.submission_id == job_id and info.entrypoint == entry
    assert {k: info.metadata[k] for k in metadata} == metadata
    assert info.runtime_env["working_dir"].startswith("gcs://")  # the working tree was uploaded
    assert info.end_time >= info.start_time > 0
    assert job_id in {j.submission_id for j in client.list_jobs()}

    # What the job wrote is the corpus we asked for: every scene once.
    table = read_corpus(out_dir)
    ids = table.column("image_id").to_pylist()
    assert len(ids) == NUM_SCENES == len(set(ids))

    # Bad submissions fail loudly through the same API.
    bad = client.submit_job(entrypoint=f"{sys.executable} -m pipelines.synthetic --set no_such_field=1",
                            runtime_env=project_runtime_env(), metadata={"project": "relate"})
    final_bad, _ = wait_job(client, bad, timeout=60)
    assert final_bad == JobStatus.FAILED.value
    assert "no_such_field" in client.get_job_logs(bad)
