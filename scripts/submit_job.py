"""Submit a project job to a Ray cluster with a readable submission id and metadata.

    python -m scripts.submit_job [--address URL] [--runtime-env FILE] [--submit] -- \\
        pipelines.annotate --config pipelines/configs/annotate_gpu.yaml --set out_dir=/mnt/shared/annotated

The job's config is loaded and validated here first (a typo fails before anything is uploaded).
The submission id is the job's run name (``relate.jobinfo.run_name``: ``annotate-annotated``) plus
a UTC timestamp; the metadata records the job, config file, overrides, git commit and user. The
dashboard's Jobs page lists both, and ``JobSubmissionClient.get_job_info(id).metadata`` returns them.

Outputs go under one root, ``RELATE_ROOT`` (``relate.storage``): ``cluster/runtime_env.yaml`` sets
it for the cluster (``/mnt/shared``); ``--root DIR`` overrides it for this submission. The config is
validated as the job will see it (with that root, inside a job), so a relative path with no root is
refused here, before anything is uploaded. The metadata's ``job_name`` is the run name (the Jobs
page's Name column).

Without ``--submit`` it prints the equivalent ``ray job submit`` command line (copy, review, run);
with ``--submit`` it submits through ``JobSubmissionClient`` (what ``ray job submit`` calls) and
prints the submission id; follow it with ``ray job logs -f <id>``.

Every shipped cluster runs Ray with token authentication (``RAY_AUTH_MODE=token``): the dashboard
refuses a submission without the cluster's token. The token is found where Ray's own clients look
(``RAY_AUTH_TOKEN``, then the file ``RAY_AUTH_TOKEN_PATH`` names, then ``~/.ray/auth_token``), or
in ``--token-file``, and sent as a bearer header; the printed command line carries the variables
the Ray CLI needs to do the same (the file's path, never the token).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shlex
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from relate.config import load_config
from relate.jobinfo import config_label, job_metadata, run_name, submission_id
from relate.storage import ROOT_ENV

__all__ = ["JOBS", "AuthToken", "ClusterAuthError", "Submission", "build_submission", "load_auth_token",
           "ray_auth_env", "ray_job_submit_argv", "submit", "main"]

REPO = Path(__file__).resolve().parents[1]

# module -> (config class, short job name used in run names)
JOBS: dict[str, tuple[str, str]] = {
    "pipelines.synthetic": ("SyntheticJobConfig", "synthetic"),
    "pipelines.annotate": ("AnnotateConfig", "annotate"),
    "train_jobs.train_relation": ("TrainRelationConfig", "train"),
    "eval_jobs.ovsgg": ("OVSGGConfig", "ovsgg"),
    "eval_jobs.judge": ("JudgeJobConfig", "judge"),
    "eval_jobs.triplet_probe": ("TripletProbeConfig", "probe"),
}


# Where Ray's clients look for the token, highest precedence first (ray._raylet.AuthenticationTokenLoader).
TOKEN_ENV = "RAY_AUTH_TOKEN"
TOKEN_PATH_ENV = "RAY_AUTH_TOKEN_PATH"
DEFAULT_TOKEN_PATH = "~/.ray/auth_token"


@dataclass(frozen=True)
class AuthToken:
    """A cluster's Ray auth token and where it was found; the value stays out of repr and logs."""

    value: str = field(repr=False)
    source: str  # "--token-file <path>", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH=<path>" or the default path
    path: str | None = None  # the file it was read from (absolute), if any

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.value}"}


class ClusterAuthError(RuntimeError):
    """The cluster refused the request for lack of a (valid) Ray auth token."""


def _read_token_file(path: str, source: str) -> AuthToken:
    file = Path(path).expanduser().resolve()
    try:
        value = file.read_text().strip()  # Ray strips surrounding whitespace too
    except OSError as e:
        raise ClusterAuthError(f"cannot read the Ray auth token from {source}: {e}") from None
    if not value:
        raise ClusterAuthError(f"the Ray auth token file {file} ({source}) is empty")
    return AuthToken(value, source, str(file))


def load_auth_token(token_file: str | None = None) -> AuthToken | None:
    """The token to send: ``token_file`` if given, else the first of ``RAY_AUTH_TOKEN``, the file
    ``RAY_AUTH_TOKEN_PATH`` names and ``~/.ray/auth_token``, the order Ray's clients use; None when
    there is none. A named file that is missing or empty is an error, as it is for Ray."""
    if token_file:
        return _read_token_file(token_file, f"--token-file {token_file}")
    if os.environ.get(TOKEN_ENV, "").strip():
        return AuthToken(os.environ[TOKEN_ENV].strip(), TOKEN_ENV)
    if os.environ.get(TOKEN_PATH_ENV):
        return _read_token_file(os.environ[TOKEN_PATH_ENV], f"{TOKEN_PATH_ENV}={os.environ[TOKEN_PATH_ENV]}")
    if Path(DEFAULT_TOKEN_PATH).expanduser().is_file():
        return _read_token_file(DEFAULT_TOKEN_PATH, DEFAULT_TOKEN_PATH)
    return None


def ray_auth_env(token: AuthToken | None, token_file: str | None = None) -> dict[str, str]:
    """Variables that make the Ray CLI (``ray job submit``, ``ray job logs``) send ``token``: token
    mode on, plus the file's path when it came from ``--token-file`` (Ray finds the others itself)."""
    if token is None:
        return {}
    env = {"RAY_AUTH_MODE": "token"}
    if token_file and token.path:
        if os.environ.get(TOKEN_ENV):  # it would win over the file; Ray skips an empty value
            env[TOKEN_ENV] = ""
        env[TOKEN_PATH_ENV] = token.path
    return env


@dataclass
class Submission:
    """Everything ``ray job submit`` needs, built from the job's own config."""

    submission_id: str
    entrypoint: str
    metadata: dict[str, str]
    runtime_env: str | None = None
    argv: list[str] = field(default_factory=list)
    root: str | None = None  # RELATE_ROOT given with --root (added to the runtime_env's env_vars)

    def runtime_env_spec(self, repo: str | Path = REPO) -> dict | None:
        """The runtime_env as the job API takes it: the YAML, plus ``RELATE_ROOT`` when ``root`` is set."""
        return _runtime_env_spec(self.runtime_env, self.root, repo)


def _runtime_env_spec(path: str | None, root: str | None, repo: str | Path = REPO) -> dict | None:
    import yaml

    spec = yaml.safe_load((Path(repo) / path).read_text()) if path else None
    if root:
        spec = dict(spec or {})
        spec["env_vars"] = {**(spec.get("env_vars") or {}), ROOT_ENV: root}
    return spec


@contextmanager
def _as_in_job(root: str | None):
    """The environment a submitted job's driver sees: Ray's job config with a submission id, and
    ``RELATE_ROOT`` only as the runtime_env sets it."""
    keys = ("RAY_JOB_CONFIG_JSON_ENV_VAR", ROOT_ENV)
    saved = {k: os.environ.get(k) for k in keys}
    os.environ["RAY_JOB_CONFIG_JSON_ENV_VAR"] = json.dumps({"metadata": {"job_submission_id": "(validating)"}})
    if root:
        os.environ[ROOT_ENV] = root
    else:
        os.environ.pop(ROOT_ENV, None)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _split_job_args(argv: Sequence[str], module: str = "") -> tuple[str | None, list[str]]:
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--config", default=None)
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    if module == "train_jobs.train_relation":
        ap.add_argument("--resume", default=None)
    args, rest = ap.parse_known_args(list(argv))
    if rest:
        raise ValueError(f"unexpected job arguments {rest}; jobs take --config FILE and --set KEY=VALUE only "
                         f"(and training --resume RUN)")
    resume = getattr(args, "resume", None)
    return args.config, args.overrides + ([f"run.name={resume}", "run.resume=true"] if resume else [])


def build_submission(module: str, job_argv: Sequence[str], runtime_env: str | None = "cluster/runtime_env.yaml",
                     python: str = "python", repo: str | Path = REPO, root: str | None = None) -> Submission:
    """Validate the job's config as the job will (inside a job, with the root the runtime_env gives
    it, ``root`` overriding), then name it and describe it for the job API."""
    if module not in JOBS:
        raise ValueError(f"unknown job module {module!r}; valid: {sorted(JOBS)}")
    cls_name, short = JOBS[module]
    config, overrides = _split_job_args(job_argv, module)
    cls = getattr(importlib.import_module(module), cls_name)
    env = _runtime_env_spec(runtime_env, root, repo) or {}
    with _as_in_job((env.get("env_vars") or {}).get(ROOT_ENV)):
        cfg = load_config(cls, Path(repo) / config if config and not Path(config).is_absolute() else config, overrides)
    name = run_name(short, config_label(cfg))
    entry = " ".join(shlex.quote(a) for a in [python, "-m", module, *job_argv])
    meta = job_metadata(module, config, overrides, repo=repo, run=name, job_name=name)
    return Submission(submission_id(name), entry, meta, runtime_env, [module, *job_argv], root)


def ray_job_submit_argv(sub: Submission, address: str | None = None) -> list[str]:
    """The ``ray job submit`` command line for ``sub`` (as a list; ``shlex.join`` it to print)."""
    argv = ["ray", "job", "submit"] + (["--address", address] if address else [])
    argv += ["--submission-id", sub.submission_id, "--metadata-json", json.dumps(sub.metadata, sort_keys=True)]
    if sub.root:  # the YAML plus RELATE_ROOT, inline (ray job submit takes a file or JSON, not both)
        argv += ["--runtime-env-json", json.dumps(sub.runtime_env_spec(), sort_keys=True)]
    elif sub.runtime_env:
        argv += ["--runtime-env", sub.runtime_env]
    return argv + ["--", *shlex.split(sub.entrypoint)]


def submit(sub: Submission, address: str | None = None, token: AuthToken | None = None) -> str:
    """Submit through the job API with ``token`` as a bearer header; returns the submission id.
    Raises ``ClusterAuthError`` naming what was (not) sent when the cluster refuses it."""
    from ray.exceptions import AuthenticationError
    from ray.job_submission import JobSubmissionClient

    try:
        # The explicit header works whatever RAY_AUTH_MODE says in this process (Ray's client adds
        # its own header only in token mode, and never over one it was given).
        client = JobSubmissionClient(address, headers=token.headers() if token else None)
        return client.submit_job(entrypoint=sub.entrypoint, submission_id=sub.submission_id,
                                 metadata=sub.metadata, runtime_env=sub.runtime_env_spec())
    except AuthenticationError:
        where = address or os.environ.get("RAY_ADDRESS") or "the default address"
        if token is None:
            raise ClusterAuthError(
                f"the cluster at {where} refused the job: it requires a Ray auth token and none was found "
                f"(--token-file, {TOKEN_ENV}, {TOKEN_PATH_ENV} or {DEFAULT_TOKEN_PATH}); copy the cluster's "
                "token to one of them") from None
        raise ClusterAuthError(
            f"the cluster at {where} refused the token from {token.source}: it is not this cluster's token") from None


def main(argv: Sequence[str] | None = None) -> str:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv:
        raise SystemExit("usage: python -m scripts.submit_job [options] -- <job module> [--config FILE] [--set K=V ...]")
    cut = argv.index("--")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--address", default=None, help="dashboard address (default: RAY_ADDRESS)")
    ap.add_argument("--runtime-env", default="cluster/runtime_env.yaml", help="runtime_env YAML ('' for none)")
    ap.add_argument("--root", default=None, help=f"{ROOT_ENV} for this job: where relative output paths go "
                    "(shared storage: an absolute path every node mounts, or a URI); default: the runtime_env's")
    ap.add_argument("--submit", action="store_true", help="submit now instead of printing the command")
    ap.add_argument("--token-file", default=None,
                    help=f"file holding the cluster's Ray auth token (default: {TOKEN_ENV}, {TOKEN_PATH_ENV} "
                         f"or {DEFAULT_TOKEN_PATH}, as Ray's clients look)")
    opts = ap.parse_args(argv[:cut])
    if cut + 1 >= len(argv):
        raise SystemExit("no job module after --")
    sub = build_submission(argv[cut + 1], argv[cut + 2:], runtime_env=opts.runtime_env or None, root=opts.root)
    try:
        token = load_auth_token(opts.token_file)
    except ClusterAuthError as e:
        raise SystemExit(str(e)) from None
    env = "".join(f"{k}={shlex.quote(v)} " for k, v in ray_auth_env(token, opts.token_file).items())
    if not opts.submit:
        if token is None:
            print(f"note: no Ray auth token found ({TOKEN_ENV}, {TOKEN_PATH_ENV}, {DEFAULT_TOKEN_PATH}); "
                  "clusters started from cluster/ refuse a submission without one", file=sys.stderr)
        line = env + shlex.join(ray_job_submit_argv(sub, opts.address))
        print(line)
        return line
    try:
        job_id = submit(sub, opts.address, token)
    except ClusterAuthError as e:
        raise SystemExit(f"error: {e}") from None
    address = f" --address {shlex.quote(opts.address)}" if opts.address else ""
    print(f"submitted {job_id}; follow with: {env}ray job logs{address} -f {job_id}")
    return job_id


if __name__ == "__main__":
    main()
