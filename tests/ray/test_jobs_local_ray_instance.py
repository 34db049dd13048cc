"""A training job's own local Ray instance (``train_jobs.local_ray.init_ray``): a detached actor
created by another actor (where Ray Train 2 puts its placement-group cleaner, created by the run's
controller) logs the cleaner's state-API warning and another message through the cleaner's logger.
On a plain ``ray.init(include_dashboard=False)`` both reach the driver's console (the control: the
path the warning took, 1,630 times in a 29-minute cpu_long run); on the job's instance only the
other message does.

Each instance is started in a child process with a Ray temp folder of its own (``RAY_TMPDIR``):
``ray.init`` without an address joins the cluster a ``ray start`` on this host last recorded there,
and other tests run such clusters. The real cleaner is not used here: with several Ray instances on
one host its state-API lookup raises instead of warning, so whether it warns depends on the host."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

MISS = "Failed to query Ray Train Controller actor state"
OTHER = "the cleaner's other message"

_RUN = textwrap.dedent(f"""
    import logging, sys, time
    import ray
    from train_jobs.local_ray import CLEANER_LOGGER
    if sys.argv[1] == "job":
        from train_jobs.local_ray import init_ray
        init_ray()
    else:
        ray.init(include_dashboard=False, configure_logging=False)

    @ray.remote(num_cpus=0)
    class Cleaner:
        def speak(self):
            log = logging.getLogger(CLEANER_LOGGER)
            log.warning("{MISS}. State API may be temporarily unavailable. Continuing to monitor.")
            log.warning("{OTHER}")
            return True

    @ray.remote(num_cpus=0)
    class Controller:
        def run(self):
            cleaner = Cleaner.options(lifetime="detached", name="cleaner").remote()
            try:
                return ray.get(cleaner.speak.remote())
            finally:
                ray.kill(cleaner)

    assert ray.get(Controller.remote().run.remote())
    time.sleep(3)  # the workers' log lines reach the driver
    print("RUN FINISHED", flush=True)
""")


def _run(how: str) -> str:
    tmp = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # short: Ray's socket paths live under it
    try:
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {"RAY_TMPDIR": tmp}
        out = subprocess.run([sys.executable, "-c", _RUN, how], capture_output=True, text=True, timeout=240, env=env)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    assert out.returncode == 0 and "RUN FINISHED" in out.stdout, out.stderr[-3000:]
    return out.stdout + out.stderr


def test_the_jobs_local_instance_drops_the_cleaners_state_api_warning_and_nothing_else():
    plain = _run("plain")
    assert plain.count(MISS) == 1 and plain.count(OTHER) == 1  # the control: both reach the console
    job = _run("job")
    assert job.count(MISS) == 0 and job.count(OTHER) == 1
