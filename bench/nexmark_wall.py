"""A Nexmark input whose events come at their event time by the wall clock: its ``base_time`` is
a wall time (milliseconds since the epoch), and event n is read no sooner than its time. So the
wall clock less a task's watermark is how far behind the events the task runs
(bench/nexmark.py's latency)."""

from __future__ import annotations

import time
from typing import Any

from peer.job.spec import Task
from peer.nexmark.config import SettingError
from peer.plugins import checks_params, error
from peer.plugins.nexmark import NexmarkInput, settings
from peer.plugins.splits import Splits


def _checked(params: Any) -> None:
    settings(params)


@checks_params(_checked)
def input(task: Task, slot: int, slots: int, *, splits: Splits) -> NexmarkInput:
    """The factory named ``bench.nexmark_wall:input``: the Nexmark input's params."""
    try:
        config, _, _ = settings(task.params)
    except SettingError as e:
        raise error(task, f"params: {e}") from None
    return WallPaced(task, config, splits, paced=True)


class WallPaced(NexmarkInput):
    def _due(self) -> int:
        """The first event number whose time has not come by the wall clock."""
        config = self.config
        elapsed_us = (time.time() * 1000 - config.base_time) * 1000
        return max(0, int(elapsed_us / config.inter_event_delay_us) + 1)
