"""An input's watermark while it reads nothing: chosen once, by the task's ``idle_timeout``.

An input's watermark comes from what it reads, so a source that falls silent holds it, and with
it every window and join downstream, until its next row, however late that comes. With an
``idle_timeout``, an input that has read nothing for that many seconds is idle: its watermark
then moves on with the wall clock from where its rows left it, at ``event_time_per_second`` units
of event time a second, as the watermark of a source whose event time follows the wall clock
would. So a window ends on time after the last rows before a pause. A row read after it that is
behind the watermark so moved is late (a window's or join's ``late`` output takes it), and the
watermark never goes back. An input that has read no row yet has no watermark to move on.

The watermark moves on once every ``PERIOD`` of the wall clock, not at every step of the loop:
each move is a watermark sent to every downstream peer, and a runner does one thing a step, so a
watermark new at every step would leave it no step in which to see its input end.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from peer.job.spec import Task

PERIOD = 0.1
"""Seconds of the wall clock between the moves of an idle input's watermark."""


class Idleness:
    """An input with an ``idle_timeout``: when it last read rows, and its watermark moved on
    with the wall clock once it has been idle."""

    def __init__(
        self, after: float, per_second: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.after, self.per_second, self.clock = after, per_second, clock
        self.last = clock()

    def read(self) -> None:
        """Rows were read just now."""
        self.last = self.clock()

    def mark(self, mark: float | None) -> float | None:
        """``mark``, the watermark of what was read, moved on by the time since the last rows
        were read once that is ``after`` seconds or more, in whole periods after that."""
        idle = self.clock() - self.last
        if mark is None or idle < self.after:
            return mark
        return mark + (idle - (idle - self.after) % PERIOD) * self.per_second


class NeverIdle:
    """An input without an ``idle_timeout``: its watermark is what its rows make it."""

    def read(self) -> None:
        """Nothing to note."""

    def mark(self, mark: float | None) -> float | None:
        return mark


NEVER_IDLE = NeverIdle()


def idleness_for(task: Task) -> Idleness | NeverIdle:
    if task.idle_timeout is None:
        return NEVER_IDLE
    return Idleness(task.idle_timeout, task.event_time_per_second)
