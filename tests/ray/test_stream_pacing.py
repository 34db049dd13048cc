"""``train_jobs.stream_pacing`` against Ray Data's real streaming executor.

The callback reads two private attributes of the executor (its topology, each operator's output
backpressure flag), so these tests run it where Ray Data itself sets them: a map stage whose queued
blocks fill a small object store budget while a slow reader drains it must be paced, every row still
read exactly once; the same stream with room for all of it must not be. What pacing saves in CPU is a
measurement, not a test: ``python -m scripts.split_backpressure_cpu --budget-mb 20 [--paced]``.

An execution's resources come from Ray Data's autoscaling coordinator, asked without blocking: until its
answer arrives (a refresh of the limits, about a second in; the first execution of a fresh Ray waits
for the coordinator actor to start, 25 s on loaded cores) the executor's limits read zero, outputs
are held back with any budget, and the callback rightly pauses. So both tests count only the steps
that began after the grant, and read their first batch, then wait for the grant before reading the
rest: with zero limits Ray Data dispatches only for liveness, so the stream is still running then.
"""

from __future__ import annotations

import sys
import time

import numpy as np
import pytest
import ray.cloudpickle

from train_jobs.stream_pacing import PaceUnderOutputBackpressure, paced

pytestmark = pytest.mark.slow
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the map stage's class, for Ray's workers

ROWS, BLOCK = 16 * 24, 16


class _Images:
    def __call__(self, batch):
        n = len(batch["row"])
        return {"row": batch["row"], "x": np.random.rand(n, 3, 48, 48).astype(np.float32)}  # 442 KB a block


class _Counted(PaceUnderOutputBackpressure):
    """The pacing callback, each instance kept where the test can count its pauses (the executor of
    ``iter_batches`` runs in this process), split at the coordinator's grant: a step counts as granted
    when the executor's object store limit read positive at an earlier step (once granted, it stays)."""

    PAUSE_S = 0.01
    made: list[_Counted] = []

    def __init__(self) -> None:
        super().__init__()
        self.granted = False
        self.granted_steps = self.granted_pauses = 0
        self.made.append(self)

    def on_execution_step(self, executor) -> None:
        before = self.pauses
        super().on_execution_step(executor)
        if self.granted:
            self.granted_steps += 1
            self.granted_pauses += self.pauses - before
        self.granted = self.granted or executor._resource_manager.get_global_limits().object_store_memory > 0


def _granted_pauses() -> int:
    return sum(c.granted_pauses for c in _Counted.made)


def _wait_for_grant(timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not (_Counted.made and _Counted.made[-1].granted):
        if time.monotonic() > deadline:
            pytest.fail(f"Ray Data's coordinator granted the execution no resources in {timeout_s:.0f} s")
        time.sleep(0.02)


def _read(ray, budget_bytes: int | None, pause_s: float) -> list[int]:
    ds = ray.data.from_items([{"row": i} for i in range(ROWS)], override_num_blocks=ROWS // BLOCK)
    ds = ds.map_batches(_Images, batch_size=BLOCK, compute=ray.data.ActorPoolStrategy(size=1), num_cpus=0.25)
    ctx = ds.context
    if budget_bytes is not None:
        ctx.execution_options.resource_limits = ctx.execution_options.resource_limits.copy(
            object_store_memory=budget_bytes)
    ctx.custom_execution_callback_classes = [*ctx.custom_execution_callback_classes, _Counted]
    rows = []
    for batch in ds.iter_batches(batch_size=BLOCK, batch_format="numpy"):
        if not rows:
            _wait_for_grant()
        rows.extend(batch["row"].tolist())
        time.sleep(pause_s)
    return rows


def test_a_stream_held_back_by_its_budget_is_paced_and_reads_every_row_once(ray_session):
    _Counted.made.clear()
    rows = _read(ray_session, budget_bytes=2 * 2**20, pause_s=0.05)
    assert sorted(rows) == list(range(ROWS))
    assert _Counted.made and _granted_pauses() > 0


def test_a_stream_with_room_for_all_of_it_is_not_paced(ray_session):
    _Counted.made.clear()
    rows = _read(ray_session, budget_bytes=None, pause_s=0.0)
    assert sorted(rows) == list(range(ROWS))
    assert _Counted.made and sum(c.granted_steps for c in _Counted.made) > 0
    assert _granted_pauses() == 0


def test_paced_adds_the_callback_once_to_the_datasets_own_context(ray_session):
    ds = ray_session.data.from_items([{"row": 0}])
    assert paced(paced(ds)) is ds
    assert ds.context.custom_execution_callback_classes.count(PaceUnderOutputBackpressure) == 1
    assert PaceUnderOutputBackpressure not in ray_session.data.DataContext.get_current().custom_execution_callback_classes
