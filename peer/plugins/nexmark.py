"""Nexmark's events as an input (``peer.plugins.nexmark:input``): people, auctions and bids as
rows, each with its ``kind`` (peer.nexmark.events), event time in ``dateTime`` (milliseconds).

Its params are the generator's settings (peer.nexmark.config: ``events``, ``rate``, ``seed``,
the proportions and ratios, ``out_of_order_group_size``, ...), ``paced``: false (the default)
makes events as fast as they are read, event time running ahead of the clock; true makes none
before its time, ``rate`` a second from the first poll; and ``format``: "rows" (the default),
or "arrow" for Arrow record batches of ``EVENT_SCHEMA`` (peer.nexmark.columns, which makes
them a batch at a time), every kind's columns, null where a kind has none, for tasks that work
on batches (``engine: arrow``). A setting out of range fails the task at once, naming it.

Event number n is item n of the task's splits (peer.plugins.splits): its checkpoint is each
owned split's next event number, so a replay makes the same events and the task may run on
another number of peers. Its watermark is the least time of the events still to come, less
``watermark_delay_ms``: within a group of ``out_of_order_group_size`` events times run out of
order, and the watermark stays at the group's first time until the group has been read."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from peer.job.spec import Task
from peer.nexmark.columns import batch
from peer.nexmark.config import LIMIT, NexmarkConfig, SettingError
from peer.nexmark.events import event, event_time
from peer.plugins import PluginError, Recovery, checks_params, error
from peer.plugins.splits import Numbered, Splits
from peer.values.epoch import Epoch

FORMATS = ("rows", "arrow")


def settings(params: Mapping[str, Any]) -> tuple[NexmarkConfig, bool, str]:
    """The generator's settings, ``paced`` and ``format`` from a task's params; a SettingError
    names the one out of range."""
    given = dict(params)
    paced = given.pop("paced", False)
    if not isinstance(paced, bool):
        raise SettingError(f"paced must be true or false, got {paced!r}")
    made = given.pop("format", "rows")
    if made not in FORMATS:
        raise SettingError(f"format must be one of {', '.join(FORMATS)}, got {made!r}")
    return NexmarkConfig.of(given), paced, made


def _checked(params: Mapping[str, Any]) -> None:
    settings(params)


@checks_params(_checked)
def input(task: Task, slot: int, slots: int, *, splits: Splits) -> NexmarkInput:
    """The factory named ``peer.plugins.nexmark:input``."""
    try:
        config, paced, made = settings(task.params)
    except SettingError as e:
        raise error(task, f"params: {e}") from None
    reader = NexmarkArrowInput if made == "arrow" else NexmarkInput
    return reader(task, config, splits, paced)


class NexmarkInput:
    """The events of the splits a slot owns, made as they are polled."""

    def __init__(self, task: Task, config: NexmarkConfig, splits: Splits, paced: bool) -> None:
        self.task, self.config, self.splits, self.paced = task, config, splits, paced
        self.length = LIMIT if config.events is None else config.events
        self.reading = self._reading(None)
        self.started: float | None = None
        """When the pacing started, by the monotonic clock: at the first paced poll."""
        self.first = 0
        """The event number the reading stood at then, due at once."""

    def _reading(self, checkpoint: Any) -> Numbered:
        return Numbered(self.splits, self.length, checkpoint, self._invalid)

    def _invalid(self, message: str) -> PluginError:
        return error(self.task, message)

    def recover(self, recovery: Recovery) -> None:
        self.reading = self._reading(recovery.checkpoint)
        self.started = None

    def poll(self, limit: int) -> Any:
        config = self.config
        return [event(config, number) for run in self._runs(limit) for number in run]

    def _runs(self, limit: int) -> list[range]:
        """The numbers of the next events to make: up to ``limit``, those due when paced."""
        return self.reading.take(limit, self._due() if self.paced else None)

    def _due(self) -> int:
        """The first event number not yet due: events come ``rate`` a second from the first
        poll, or, after a restore, from where the reading stands."""
        now = time.monotonic()
        if self.started is None:
            self.started, self.first = now, self.reading.next
        return self.first + int((now - self.started) * self.config.rate) + 1

    def watermark(self) -> float:
        """The least event time still to come (the first of the group the next event is in),
        less the configured delay."""
        config = self.config
        group = config.out_of_order_group_size
        first = (self.reading.next // group) * group
        return event_time(config, first) - config.watermark_delay_ms

    def checkpoint(self, epoch: Epoch) -> list[list[int]]:
        return self.reading.checkpoint()

    def completed(self) -> bool:
        return self.reading.completed()

    def synced(self) -> bool:
        return True

    def committed(self, epoch: Epoch) -> None:
        """Nothing to acknowledge: events are made, not taken."""

    def close(self) -> None:
        """Nothing to release."""


class NexmarkArrowInput(NexmarkInput):
    """The same events as Arrow record batches of ``EVENT_SCHEMA``, made a batch at a time
    (peer.nexmark.columns)."""

    def poll(self, limit: int) -> Any:
        runs = self._runs(limit)
        return batch(self.config, runs) if runs else []
