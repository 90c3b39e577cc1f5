"""What a trigger does when it fires one extent of one key: sync, then emit.

The event ``{"window", "key", "start", "end", "value", "task"}`` goes first to ``sync`` (to write
the value somewhere, say), then to ``emit``, which turns it into what the task sends on: a
segment, a list of segments, or None for nothing. Without ``emit`` the task sends the event less
its ``task``. When a trigger fires is ``peer.state.task_state``'s business; both functions must
leave the event as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from peer.job.imports import resolve
from peer.job.spec import Trigger
from peer.state.windows import Extent

Event = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Armed:
    """A trigger with the code its paths name loaded."""

    spec: Trigger
    predicate: Callable[[Any], bool] | None
    emit: Callable[[Event], Any] | None
    sync: Callable[[Event], Any] | None

    def fire(self, task: str, key: Any, extent: Extent, value: Any) -> list[Any]:
        start, end = extent
        segment = {
            "window": self.spec.window,
            "key": key,
            "start": start,
            "end": end,
            "value": value,
        }
        event = {**segment, "task": task}
        if self.sync is not None:
            self.sync(event)
        return [segment] if self.emit is None else _segments(self.emit(event))


def arm(trigger: Trigger) -> Armed:
    paths = (trigger.predicate, trigger.emit, trigger.sync)
    return Armed(trigger, *(None if path is None else resolve(path) for path in paths))


def _segments(result: Any) -> list[Any]:
    if result is None:
        return []
    return result if isinstance(result, list) else [result]
