"""The job submission API (what `ray job submit` uses, served by the dashboard) end to end.

A local head with the dashboard plus one worker node (advertising `annotator`); the annotation
pipeline is submitted through JobSubmissionClient with the submission id, metadata and entrypoint
that `scripts/submit_job.py` builds from the job's config, plus the project's runtime_env
(cluster/runtime_env.yaml minus pip). It is followed through its statuses and logs to completion,
as a user would follow it on the dashboard's Jobs page: the metadata comes back from
`get_job_info`, and the log carries the job's progress lines (shards done/total with ETA).
"""

from __future__ import annotations

import asyncio
import re
import sys

import pyarrow.parquet as pq
import pytest
from PIL import Image

from _ray_local_cluster import REPO, head_with_workers, project_runtime_env, wait_job

pytestmark = pytest.mark.slow

NUM_SCENES = 12
SHARD_SIZE = 4


def _world(root) -> None:
    """A 12-scene corpus (train split only) in the project layout, written in this process."""
    from relate.data.synthetic import SyntheticConfig, make_scene
    from relate.schema import CORPUS_SCHEMA, to_table

    world = SyntheticConfig(seed=3, min_size=64, max_size=96)
    (root / "images").mkdir(parents=True)
    rows = []
    for i in range(NUM_SCENES):
        scene = make_scene(i, world)
        uri = root / "images" / f"{scene.image_id}.png"
        Image.fromarray(scene.image).save(uri)
        rows.append(scene.to_record(str(uri), "train"))
    (root / "corpus" / "train").mkdir(parents=True)
    pq.write_table(to_table(rows, CORPUS_SCHEMA), root / "corpus" / "train" / "part-0.parquet")
    from relate.config import dump_config

    dump_config(world, root / "synthetic_config.yaml")  # the rules the scripted pairs pass answers from


async def _tail(client, job_id: str, timeout: float) -> list[str]:
    chunks: list[str] = []

    async def run() -> None:
        async for chunk in client.tail_job_logs(job_id):
            chunks.append(chunk)

    await asyncio.wait_for(run(), timeout)
    return chunks


@pytest.fixture
def cluster():
    with head_with_workers({"w1": (1, {"annotator": 1})}) as c:  # the job's actor asks for `annotator`
        yield c


def test_submit_follow_and_read_back(cluster, tmp_path):
    from ray.job_submission import JobStatus

    from relate.data.corpus import read_corpus
    from scripts.submit_job import build_submission

    _world(tmp_path / "world")
    out_dir = tmp_path / "annotated"
    sub = build_submission("pipelines.annotate", [
        "--config", "pipelines/configs/annotate_synthetic.yaml", "--set", f"input_dir={tmp_path / 'world'}",
        "--set", f"out_dir={out_dir}", "--set", "splits=[train]", "--set", f"shard_size={SHARD_SIZE}",
        "--set", "cpu_batch_size=12", "--set", "generate.batch_size=12",
        "--set", "generate.resources.resources.annotator=1"], python=sys.executable, repo=REPO)
    client = cluster.job_client()
    returned = client.submit_job(entrypoint=sub.entrypoint, submission_id=sub.submission_id, metadata=sub.metadata,
                                 runtime_env=project_runtime_env())
    assert returned == sub.submission_id and returned.startswith("annotate-annotated-")
    job_id = returned

    # Follow the log stream while polling the status, like `ray job submit` does.
    log_chunks = asyncio.run(_tail(client, job_id, timeout=300))
    final, seen = wait_job(client, job_id, timeout=30)
    logs = client.get_job_logs(job_id)
    assert final == JobStatus.SUCCEEDED.value, f"job ended {final}; statuses {seen}\n{logs[-3000:]}"

    # The streamed log is the stored log; it carries the progress lines and the job's own summary.
    streamed = "".join(log_chunks)
    assert "annotation run" in streamed and "annotation run" in logs
    n_shards = NUM_SCENES // SHARD_SIZE
    done = [int(k) for k in re.findall(rf"\[annotate-annotated\] shards (\d+)/{n_shards} \(\d+%\) elapsed \S+ eta \S+", logs)]
    assert done == list(range(1, n_shards + 1)), f"progress lines {done}\n{logs[-3000:]}"
    assert f"{NUM_SCENES} images in {n_shards} shards" in logs

    # Name and metadata are what the dashboard shows; the job is listed with them.
    info = client.get_job_info(job_id)
    assert info.submission_id == job_id and info.entrypoint == sub.entrypoint
    assert {k: info.metadata[k] for k in sub.metadata} == sub.metadata
    assert info.metadata["job"] == "pipelines.annotate" and info.metadata["git_commit"] != "unknown"
    assert info.runtime_env["working_dir"].startswith("gcs://")  # the working tree was uploaded
    assert info.end_time >= info.start_time > 0
    assert job_id in {j.submission_id for j in client.list_jobs()}

    # What the job wrote is the corpus we asked for: every scene once.
    ids = read_corpus(out_dir).column("image_id").to_pylist()
    assert len(ids) == NUM_SCENES == len(set(ids))

    # Bad submissions fail loudly through the same API.
    bad = client.submit_job(entrypoint=f"{sys.executable} -m pipelines.synthetic --set no_such_field=1",
                            runtime_env=project_runtime_env(), metadata={"project": "relate"})
    final_bad, _ = wait_job(client, bad, timeout=60)
    assert final_bad == JobStatus.FAILED.value
    assert "no_such_field" in client.get_job_logs(bad)
