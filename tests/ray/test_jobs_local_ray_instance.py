"""A training job's own local Ray instance (``train_jobs.local_ray.init_ray``): a real Ray Train run
on it prints none of the placement-group cleaner's once-a-second warnings, while the same run on a
plain ``ray.init(include_dashboard=False)`` prints them (the control: the run lasts long enough for
the cleaner to ask, and fail, several times). Each instance is started in a child process of its own,
beside the session's instance."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

MISS = "Failed to query Ray Train Controller actor state"

_RUN = textwrap.dedent("""
    import sys, tempfile, time
    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer
    if sys.argv[1] == "job":
        from train_jobs.local_ray import init_ray
        init_ray()
    else:
        ray.init(include_dashboard=False, configure_logging=False)
    with tempfile.TemporaryDirectory() as d:
        TorchTrainer(lambda: time.sleep(6), scaling_config=ScalingConfig(num_workers=1, resources_per_worker={"CPU": 0.5}),
                     run_config=RunConfig(storage_path=d)).fit()
    time.sleep(2)  # the workers' last log lines reach the driver
    print("RUN FINISHED", flush=True)
""")


def _run(how: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    out = subprocess.run([sys.executable, "-c", _RUN, how], capture_output=True, text=True, timeout=240, env=env)
    assert out.returncode == 0 and "RUN FINISHED" in out.stdout, out.stderr[-3000:]
    return out.stdout + out.stderr


def test_the_jobs_local_instance_drops_the_cleaners_state_api_warnings():
    assert _run("plain").count(MISS) >= 2  # the control: Ray Train's cleaner asks every second and fails
    assert _run("job").count(MISS) == 0
