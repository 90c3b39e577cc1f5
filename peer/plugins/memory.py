"""In-memory plugins, for tests, examples and demos: an input whose segments are written into the
job itself, and an output that collects segments in this process.

``params.segments`` lists them, or ``params.count`` N stands for ``{"n": 0}`` .. ``{"n": N-1}``
without building the list. Item i belongs to slot ``i % slots``, so each peer knows its share
without asking the others, and a checkpoint is just the index this slot has reached (whatever
the epoch). The data lives in the job, so a commit has no source to tell: ``committed`` does
nothing. Segments are handed out as fresh plain data on every poll: the frozen params stay as the
job wrote them, so a replay after recovery gives the same segments even if a downstream function
mutated the first copies.

The collecting output (``peer.plugins.memory:output``) keeps what each slot of an output task
wrote in a list of this process, under the name ``params.collection``: ``collected(name)`` reads
them, ``discard(name)`` drops them. Its checkpoint is how many segments its slot holds, and
recovery cuts the list back to that, so what a replay writes again is held once; it suits jobs
run in this process (``peer.testing``), not a cluster of processes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from pyrsistent import thaw

from peer.job.spec import Task
from peer.plugins import Recovery, error, natural, param
from peer.values.columnar import Batch, rows
from peer.values.epoch import Epoch


def input(task: Task, slot: int, slots: int) -> MemoryInput:
    """The factory named ``peer.plugins.memory:input``."""
    given = [name for name in ("segments", "count") if name in task.params]
    if len(given) != 1:
        raise error(task, "set exactly one of params.segments and params.count")
    if given == ["count"]:
        count = param(task, "count", "an int >= 0", natural)
        return MemoryInput(task, _numbered, count, slot, slots)
    segments = param(task, "segments", "a list", _is_list)
    return MemoryInput(task, lambda i: thaw(segments[i]), len(segments), slot, slots)


class MemoryInput:
    """Items ``slot``, ``slot + slots``, ... of a sequence of ``length`` items."""

    def __init__(
        self, task: Task, item: Callable[[int], Any], length: int, slot: int, slots: int
    ) -> None:
        self._task = task
        self._item = item
        self._length = length
        self._slot = slot
        self._slots = slots
        self._next = slot

    def recover(self, recovery: Recovery) -> None:
        checkpoint = recovery.checkpoint
        if checkpoint is not None and not natural(checkpoint):
            raise error(self._task, f"checkpoint must be an index >= 0, got {checkpoint!r}")
        start = checkpoint or 0
        self._next = start + (self._slot - start) % self._slots

    def poll(self, limit: int) -> list[Any]:
        taken = range(self._next, self._length, self._slots)[: max(limit, 0)]
        self._next += len(taken) * self._slots
        return [self._item(i) for i in taken]

    def checkpoint(self, epoch: Epoch) -> int:
        return self._next

    def completed(self) -> bool:
        return self._next >= self._length

    def synced(self) -> bool:
        return True

    def committed(self, epoch: Epoch) -> None:
        """Nothing to acknowledge: the segments live in the job."""

    def close(self) -> None:
        """Nothing to release."""


def output(task: Task, slot: int, slots: int) -> MemoryOutput:
    """The factory named ``peer.plugins.memory:output``."""
    name = param(task, "collection", "a non-empty string", lambda v: isinstance(v, str) and v != "")
    with _LOCK:
        lists = _COLLECTIONS.setdefault(name, {})
        written = lists.setdefault((task.name, slot), [])
    return MemoryOutput(task, written)


_COLLECTIONS: dict[str, dict[tuple[str, int], list[Any]]] = {}
"""Collection name to (task, slot) to the segments that slot holds."""
_LOCK = threading.Lock()


def collected(name: str) -> dict[str, list[Any]]:
    """What the outputs collecting into ``name`` hold: per task, its slots' segments in slot
    order."""
    with _LOCK:
        lists = sorted(_COLLECTIONS.get(name, {}).items())
    result: dict[str, list[Any]] = {}
    for (task, _), segments in lists:
        result.setdefault(task, []).extend(segments)
    return result


def discard(name: str) -> None:
    with _LOCK:
        _COLLECTIONS.pop(name, None)


class MemoryOutput:
    """Appends what its slot writes to ``written``, a list of this process."""

    def __init__(self, task: Task, written: list[Any]) -> None:
        self._task = task
        self._written = written
        self._staged: list[Any] = []

    def recover(self, recovery: Recovery) -> None:
        checkpoint = recovery.checkpoint
        if checkpoint is not None and not natural(checkpoint):
            raise error(self._task, f"checkpoint must be a segment count, got {checkpoint!r}")
        del self._written[checkpoint or 0 :]

    def prepare(self, segments: Batch) -> None:
        self._staged.extend(rows(segments))

    def write(self) -> bool:
        self._written.extend(self._staged)
        self._staged = []
        return True

    def synced(self) -> bool:
        return True

    def checkpoint(self, epoch: Epoch) -> int:
        return len(self._written)

    def committed(self, epoch: Epoch) -> None:
        """Nothing to publish: what is written is in the list already."""

    def close(self) -> None:
        """Nothing to release: the list outlives the task, for ``collected``."""


def _numbered(index: int) -> dict[str, int]:
    return {"n": index}


def _is_list(value: object) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str | bytes)
