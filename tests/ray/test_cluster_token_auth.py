"""Ray token authentication as the shipped cluster configs turn it on, against a real head.

The head is started the way cluster/aws.yaml and gcp.yaml start theirs: ``ray start --head`` with
``RAY_AUTH_MODE=token`` and ``RAY_AUTH_TOKEN_PATH`` naming a token file (KubeRay's authOptions sets
the same mode, with the token in ``RAY_AUTH_TOKEN``). It is this module's own head, not the
session's: a unique temp dir, free ports, the dashboard on 127.0.0.1 only, and every process of it
killed by process group and PID when the module ends (``LocalCluster.close``).

What it shows: the dashboard's Jobs API refuses a caller with no token (401) or a wrong one (403)
and runs nothing for it; with the token a job runs to SUCCEEDED and its log reads back; and
``scripts/submit_job.submit`` finds the token where Ray's clients look and fails with a message
that says what was missing when it cannot.
"""

from __future__ import annotations

import shlex
import sys
import uuid

import pytest
import requests

from _ray_local_cluster import TokenHead, wait_job

pytestmark = pytest.mark.slow  # ~25 s of it is `ray start --head` on a loaded 2-core host

JOB_TIMEOUT_S = 90
HTTP_TIMEOUT_S = 10


@pytest.fixture(scope="module")
def head():
    c = TokenHead(head_cpus=0, dashboard=True)
    try:
        c.start_head()  # returns once wait_for_nodes, with the token, sees the head alive
        yield c
    finally:
        c.close()


def _client(head: TokenHead, token: str | None = None):
    from ray.job_submission import JobSubmissionClient

    return JobSubmissionClient(head.dashboard_url, headers=head.headers(token))


def _print_42() -> str:
    return shlex.join([sys.executable, "-c", "print(42)"])


def test_jobs_api_refuses_callers_without_the_token(head):
    from ray.exceptions import AuthenticationError

    url = f"{head.dashboard_url}/api/jobs/"
    marker = f"refused-{uuid.uuid4().hex[:8]}"
    job = {"entrypoint": f"echo {marker}", "submission_id": marker}
    assert requests.post(url, json=job, timeout=HTTP_TIMEOUT_S).status_code == 401
    assert requests.post(url, json=job, headers=head.headers("0" * 64), timeout=HTTP_TIMEOUT_S).status_code == 403
    assert requests.get(url, timeout=HTTP_TIMEOUT_S).status_code == 401
    listed = requests.get(url, headers=head.headers(), timeout=HTTP_TIMEOUT_S)
    assert listed.status_code == 200
    assert marker not in {j.get("submission_id") for j in listed.json()}  # nothing was queued for them
    # Ray's own client without a token: refused before it uploads or submits anything.
    from ray.job_submission import JobSubmissionClient

    with pytest.raises(AuthenticationError):
        JobSubmissionClient(head.dashboard_url).submit_job(entrypoint=_print_42())
    with pytest.raises(AuthenticationError):
        _client(head, "f" * 64)


def test_job_with_the_token_succeeds_and_its_log_reads_back(head):
    client = _client(head)
    job_id = client.submit_job(entrypoint=_print_42(), metadata={"job_name": "token-auth"})
    status, seen = wait_job(client, job_id, timeout=JOB_TIMEOUT_S)
    assert status == "SUCCEEDED", (seen, client.get_job_logs(job_id))
    assert "42" in client.get_job_logs(job_id).split()
    assert client.get_job_info(job_id).metadata["job_name"] == "token-auth"


def test_submit_script_finds_the_token_as_ray_clients_do(head, monkeypatch, tmp_path):
    from scripts.submit_job import AuthToken, ClusterAuthError, Submission, load_auth_token, submit

    def submission() -> Submission:
        return Submission(f"token-auth-{uuid.uuid4().hex[:8]}", _print_42(), {"job_name": "token-auth"}, None)

    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ray/auth_token of whoever runs the tests
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    assert load_auth_token() is None
    with pytest.raises(ClusterAuthError, match="refused the job: it requires a Ray auth token"):
        submit(submission(), head.dashboard_url, None)
    with pytest.raises(ClusterAuthError, match="not this cluster's token"):
        submit(submission(), head.dashboard_url, AuthToken("0" * 64, "a test"))

    (tmp_path / "cluster_token").write_text(head.token + "\n")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "cluster_token"))
    token = load_auth_token()
    assert token is not None and token.source.startswith("RAY_AUTH_TOKEN_PATH") and head.token not in repr(token)
    job_id = submit(submission(), head.dashboard_url, token)
    status, seen = wait_job(_client(head), job_id, timeout=JOB_TIMEOUT_S)
    assert status == "SUCCEEDED", seen
