"""The local instance's worker setup hook drops exactly the placement-group cleaner's warning that
the state API could not be asked, and nothing else from that logger or any other.

The message and the logger name are Ray Train 2's own (``placement_group_cleaner.py``); the Ray test
``tests/ray/test_jobs_local_ray_instance.py`` shows the warning on a real local instance and its
absence with the hook."""

from __future__ import annotations

import logging

import pytest

from train_jobs.local_ray import CLEANER_LOGGER, quiet_state_api_misses

MISS = ("Failed to query Ray Train Controller actor state. State API may be temporarily unavailable. "
        "Continuing to monitor.")


class _Kept(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture
def cleaner_log():
    log = logging.getLogger(CLEANER_LOGGER)
    filters = list(log.filters)
    kept = _Kept()
    log.addHandler(kept)
    yield log, kept
    log.removeHandler(kept)
    log.filters[:] = filters


def test_the_cleaners_logger_is_the_one_ray_train_logs_with():
    from ray.train.v2._internal.execution.controller import placement_group_cleaner

    assert placement_group_cleaner.logger.name == CLEANER_LOGGER


def test_the_state_api_miss_is_dropped_and_every_other_message_kept(cleaner_log):
    log, kept = cleaner_log
    log.warning(MISS)
    assert kept.messages == [MISS]  # without the hook the warning goes out
    kept.messages.clear()
    quiet_state_api_misses()
    quiet_state_api_misses()  # a second call adds no second filter
    log.warning(MISS)
    log.warning("Controller actor died but placement group already removed; skipping cleanup.")
    log.warning("Failed to query something else")
    logging.getLogger("ray.train").warning(MISS)  # another logger: not the hook's
    assert kept.messages == ["Controller actor died but placement group already removed; skipping cleanup.",
                             "Failed to query something else"]
    assert sum(type(f).__name__ == "_DropStateApiMisses" for f in log.filters) == 1
