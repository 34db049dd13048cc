"""Ray Data's streaming executor paced while its output waits on the consumer.

A training stream's map stage runs ahead of the trainer until its queued blocks fill Ray Data's
object store budget. From then on the resource budget holds the finished task's output unread, so
the task stays ready, ``ray.wait`` in the executor's loop returns at once, and the loop (in Ray
Train's split coordinator) runs without pause until the trainer reads a block: on 2 cores (Ray
2.60) 0.88-0.98 of a core for nothing (``python -m scripts.split_backpressure_cpu --budget-mb 20``).
Nothing can move in that state until the consumer reads, and it has the queued blocks to read, so
``PaceUnderOutputBackpressure`` sleeps ``PAUSE_S`` after each loop step that left an operator's
output held back. The executor's own wait is 0.1 s when its tasks are busy; the pause bounds the
loop to about 20 steps a second while it has nothing to do. It also pauses at the start of an
execution, before Ray Data's autoscaling coordinator has granted it resources: the limits read zero
then, outputs are held back with any budget, and only Ray Data's liveness dispatch moves the stream.

It reads two attributes of Ray Data's executor (its topology, each operator's output backpressure
flag) that are not public API; where a Ray version lacks them, it does nothing.
"""

from __future__ import annotations

import time

from ray.data._internal.execution.execution_callback import ExecutionCallback

__all__ = ["PaceUnderOutputBackpressure", "paced"]


class PaceUnderOutputBackpressure(ExecutionCallback):
    """Sleeps ``PAUSE_S`` after an executor step in which an operator's task output was held back."""

    PAUSE_S = 0.05

    def __init__(self) -> None:
        self.pauses = 0

    def on_execution_step(self, executor) -> None:
        topology = getattr(executor, "_topology", None) or {}
        if any(getattr(op, "_in_task_output_backpressure", False) for op in topology):
            self.pauses += 1
            time.sleep(self.PAUSE_S)


def paced(ds):
    """``ds`` with ``PaceUnderOutputBackpressure`` among its executions' callbacks (its own context)."""
    ctx = ds.context
    if PaceUnderOutputBackpressure not in ctx.custom_execution_callback_classes:
        ctx.custom_execution_callback_classes = [*ctx.custom_execution_callback_classes, PaceUnderOutputBackpressure]
    return ds
