"""A runner's windows, chosen once when its code loads: a task with windows passes what its fn
returns through them (peer.state.task_state), a join's task what it received through its join
(peer.state.joins), a task without either passes it on as it is.

Either way the runner calls the same methods, so a task without windows never asks about
windows on its per-batch path. Neither variant reads the clock it is handed unless it has
windows: a logging clock (peer.runtime.causal) logs each read, so a task without windows logs
no time.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any, Protocol

from peer.job.spec import Job, Task
from peer.runtime.apply import Keys
from peer.state import TaskState
from peer.state.joins import JoinPart


class Clock(Protocol):
    def now(self) -> float: ...

    def due(self, at: float) -> float | None: ...


class Windows(Protocol):
    def apply(self, out: Any, clock: Clock) -> Any:
        """What goes on downstream of the fn's ``out``."""

    def due(self, clock: Clock) -> list[Any]:
        """What timer triggers due by now emit."""

    def due_at(self) -> float:
        """When the next timer trigger is due, by the wall clock (inf: none is armed)."""

    def watermark(self, mark: float) -> Iterator[list[Any]]:
        """What the extents ``mark`` ends emit, a list per key, fired as it is read."""

    def finish(self) -> Iterator[list[Any]]:
        """What every extent left emits, as ``watermark`` gives it."""

    def snapshot(self) -> dict[str, Any] | None: ...

    def restore(self, states: list[Any], keep: Any) -> None:
        """From the live snapshots' window states, keeping the keys ``keep`` accepts."""

    def timers(self) -> list[list[float]]: ...

    def restore_timers(self, timers: list[list[float]]) -> None: ...


class Windowed:
    """A task with windows: only what their triggers emit goes on."""

    def __init__(self, state: TaskState) -> None:
        self.state = state

    def apply(self, out: Any, clock: Clock) -> list[Any]:
        return self.state.apply(out, clock.now())

    def due(self, clock: Clock) -> list[Any]:
        now = clock.due(self.state.due_at())
        return [] if now is None else self.state.tick(now)

    def due_at(self) -> float:
        return self.state.due_at()

    def watermark(self, mark: float) -> Iterator[list[Any]]:
        return self.state.watermark(mark)

    def finish(self) -> Iterator[list[Any]]:
        return self.state.finish()

    def snapshot(self) -> dict[str, Any]:
        return self.state.snapshot()

    def restore(self, states: list[Any], keep: Any) -> None:
        self.state.restore(states, keep)

    def timers(self) -> list[list[float]]:
        return self.state.timers()

    def restore_timers(self, timers: list[list[float]]) -> None:
        self.state.restore_timers(timers)


class Unwindowed:
    """A task without windows: what its fn returns goes on as it is."""

    def apply(self, out: Any, clock: Clock) -> Any:
        return out

    def due(self, clock: Clock) -> list[Any]:
        return []

    def due_at(self) -> float:
        return math.inf

    def watermark(self, mark: float) -> Iterator[list[Any]]:
        return iter(())

    def finish(self) -> Iterator[list[Any]]:
        return iter(())

    def snapshot(self) -> None:
        return None

    def restore(self, states: list[Any], keep: Any) -> None:
        """Nothing to restore."""

    def timers(self) -> list[list[float]]:
        return []

    def restore_timers(self, timers: list[list[float]]) -> None:
        """No timers to restore."""


UNWINDOWED = Unwindowed()


def windows_for(job: Job, task: Task, keys: Keys | None) -> Windows:
    """The task's windows; a keyed task's keep their state in the slot's keyed state. A join's
    task has its join in their place (peer.state.joins), which takes what the task received
    with the side of each batch and sends the pairs."""
    if keys is not None and job.join_of(task.name) is not None:
        return JoinPart(job, task.name, keys.state())
    if not any(w.task == task.name for w in job.windows):
        return UNWINDOWED
    if keys is None:
        return Windowed(TaskState(job, task.name, None))
    return Windowed(TaskState(job, task.name, keys.key_of, keys.state()))
