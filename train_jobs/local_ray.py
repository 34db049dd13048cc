"""Ray for a training job: the cluster it was submitted to, or a local instance it starts itself.

The local instance (a workstation, CI) runs without Ray's dashboard: on a two-core
machine every process beside the step takes from it. Without the dashboard Ray's state API has
nothing to answer, and Ray Train 2's placement-group cleaner (a detached actor that asks the state
API every second whether the run's controller still lives, to release the run's resources if it
died) logs a warning for every question it could not ask: 1,630 lines to the console in one
29-minute ``cpu_long`` run, and log traffic through the log monitor and the driver. On that instance
every worker drops that one message (a ``worker_process_setup_hook``, Ray's way to configure a
worker's logging); every other message of the cleaner, and everything on a cluster the job joins
(``RAY_ADDRESS``, ``ray job submit``: the cluster's dashboard answers), is left as it is.
"""

from __future__ import annotations

import logging
import os

__all__ = ["CLEANER_LOGGER", "init_ray", "quiet_state_api_misses"]

# Ray Train 2's module-level logger of the placement-group cleaner (named after its module)
CLEANER_LOGGER = "ray.train.v2._internal.execution.controller.placement_group_cleaner"
_MISS = "Failed to query Ray Train Controller actor state"


class _DropStateApiMisses(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(_MISS)


def quiet_state_api_misses() -> None:
    """Worker setup hook: the cleaner's logger drops its could-not-ask-the-state-API warning."""
    log = logging.getLogger(CLEANER_LOGGER)
    if not any(isinstance(f, _DropStateApiMisses) for f in log.filters):
        log.addFilter(_DropStateApiMisses())


def init_ray() -> None:
    """Connect to Ray: the cluster ``RAY_ADDRESS`` names, or a new local instance without a dashboard
    whose workers run ``quiet_state_api_misses`` (``ray.init`` joins a local instance already
    running instead, and the hook then applies to this job's workers only). Nothing when Ray is
    already initialised in this process."""
    import ray

    if ray.is_initialized():
        return
    local = not os.environ.get("RAY_ADDRESS")
    ray.init(include_dashboard=False, configure_logging=False,
             runtime_env={"worker_process_setup_hook": f"{__name__}.quiet_state_api_misses"} if local else None)
