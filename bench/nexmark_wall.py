"""A Nexmark input whose events come at their event time by the wall clock: its ``base_time`` is
a wall time (milliseconds since the epoch), and event n is read no sooner than its time. So the
wall clock less a task's watermark is how far behind the events the task runs
(bench/nexmark.py's latency)."""

from __future__ import annotations

import time

from peer.job.spec import Task
from peer.plugins import checks_params
from peer.plugins.nexmark import NexmarkArrowInput, NexmarkInput
from peer.plugins.nexmark import input as nexmark_input
from peer.plugins.splits import Splits


@checks_params(nexmark_input.check_params)  # type: ignore[attr-defined]
def input(task: Task, slot: int, slots: int, *, splits: Splits) -> NexmarkInput:
    """The factory named ``bench.nexmark_wall:input``: the Nexmark input's params."""
    made = nexmark_input(task, slot, slots, splits=splits)
    paced = WallPacedArrow if isinstance(made, NexmarkArrowInput) else WallPaced
    return paced(made.task, made.config, made.splits, paced=True)


class WallPaced(NexmarkInput):
    def _due(self) -> int:
        """The first event number whose time has not come by the wall clock."""
        config = self.config
        elapsed_us = (time.time() * 1000 - config.base_time) * 1000
        return max(0, int(elapsed_us / config.inter_event_delay_us) + 1)


class WallPacedArrow(WallPaced, NexmarkArrowInput):
    """The same, as Arrow batches."""
