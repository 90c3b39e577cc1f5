"""Code the runtime tests name by dotted path."""

from __future__ import annotations

import time
from concurrent.futures import Future
from typing import Any

from peer.plugins import Recovery, Sealing
from peer.plugins.memory import MemoryInput
from peer.values.epoch import Epoch

EVENTS: list[tuple[str, dict[str, Any]]] = []


def is_long(segment: dict[str, Any]) -> bool:
    return len(segment["word"]) > 3


def always(segment: dict[str, Any]) -> bool:
    return True


def double(segment: dict[str, Any]) -> list[dict[str, Any]]:
    return [segment, segment]


def drop_odd(segment: dict[str, Any]) -> dict[str, Any] | None:
    return None if segment["n"] % 2 else segment


def explode(segment: dict[str, Any]) -> None:
    raise ZeroDivisionError("no")


class Total:
    def __init__(self) -> None:
        self.total = 0

    def __call__(self, segment: dict[str, Any]) -> None:
        self.total += segment["n"]

    def flush(self) -> list[dict[str, Any]]:
        return [{"total": self.total}]


class Counts:
    """A count per word, restored as the runtime says: the keys ``keep`` accepts."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def __call__(self, segment: dict[str, Any]) -> None:
        self.counts[segment["word"]] = self.counts.get(segment["word"], 0) + 1

    def snapshot(self) -> dict[str, int]:
        return dict(self.counts)

    def restore(self, snapshots: list[dict[str, int]], keep: Any) -> None:
        for counts in snapshots:
            self.counts.update({w: n for w, n in counts.items() if keep(w)})


class StateCounts:
    """A count per word in keyed state the engine keeps."""

    def open(self, state: Any) -> None:
        self.count = state.value_state("count", default=0)

    def __call__(self, segment: dict[str, Any]) -> dict[str, Any]:
        n = self.count.get() + 1
        self.count.set(n)
        return {**segment, "count": n}


def record(name: str):
    def hook(event: dict[str, Any]) -> None:
        EVENTS.append((name, {k: v for k, v in event.items() if k != "batch"}))

    return hook


before_task = record("before_task")
after_task = record("after_task")
after_batch = record("after_batch")


class SlowToSync:
    """An input of one segment whose source takes three asks to acknowledge it."""

    def __init__(self) -> None:
        self.left, self.asks = [{"n": 1}], 0

    def recover(self, recovery: Recovery) -> None:
        return None

    def poll(self, limit: int) -> list[dict[str, Any]]:
        batch, self.left = self.left, []
        return batch

    def checkpoint(self, epoch: Epoch) -> int:
        return 0 if self.left else 1

    def completed(self) -> bool:
        return not self.left

    def synced(self) -> bool:
        self.asks += 1
        return self.asks >= 3

    def committed(self, epoch: Epoch) -> None:
        return None

    def close(self) -> None:
        return None


def slow_to_sync(task: Any, slot: int, slots: int) -> SlowToSync:
    return SlowToSync()


def event_time(segment: dict[str, Any]) -> float:
    return float(segment["n"])


def inflate(segment: dict[str, Any]) -> dict[str, Any]:
    return {"n": segment["n"], "blob": "x" * segment["size"]}


class FailsAtCommit:
    """An output whose sink refuses to publish what was committed."""

    def recover(self, recovery: Recovery) -> None:
        return None

    def prepare(self, segments: list[Any]) -> None:
        return None

    def write(self) -> bool:
        return True

    def synced(self) -> bool:
        return True

    def checkpoint(self, epoch: Epoch) -> None:
        return None

    def committed(self, epoch: Epoch) -> None:
        raise OSError("the sink's disk is full")

    def close(self) -> None:
        return None


def fails_at_commit(task: Any, slot: int, slots: int) -> FailsAtCommit:
    return FailsAtCommit()


SEALS: list[Future[None]] = []
"""The sealings ``SealsLater`` outputs returned, for a test to finish."""


class SealsLater(FailsAtCommit):
    """An output whose epochs become durable only when a test finishes their sealing."""

    def checkpoint(self, epoch: Epoch) -> Sealing:
        sealing: Future[None] = Future()
        SEALS.append(sealing)
        return Sealing(None, sealing)


def seals_later(task: Any, slot: int, slots: int) -> SealsLater:
    return SealsLater()


def tag_set(segment: dict[str, Any]) -> dict[str, Any]:
    """A segment with a set in it: a set cannot travel between groups."""
    return {**segment, "meta": {"tags": {"a"}}}


def exits(segment: dict[str, Any]) -> None:
    raise SystemExit(3)


def interrupts(segment: dict[str, Any]) -> None:
    raise KeyboardInterrupt


def closes(segment: dict[str, Any]) -> None:
    raise GeneratorExit


MARKS: list[int] = []
WORD: list[Any] = [None]
"""The word a test installed as this process's (peer.code_marks)."""


def note_mark(segment: dict[str, Any]) -> dict[str, Any]:
    """What the shared word holds while the fn runs."""
    MARKS.append(int(WORD[0][0]))
    return segment


def halve(segment: dict[str, Any]) -> dict[str, Any]:
    return {**segment, "n": segment["n"] // 2}


class Paced(MemoryInput):
    """The memory input, its segments coming ``params.rate`` a second from its first poll: a
    source that trickles."""

    def __init__(self, task: Any, slot: int, slots: int) -> None:
        super().__init__(task, lambda i: {"n": i}, task.params["count"], slot, slots)
        self.rate: float = task.params["rate"]
        self.started: float | None = None

    def poll(self, limit: int) -> list[Any]:
        now = time.monotonic()
        if self.started is None:
            self.started = now
        due = int((now - self.started) * self.rate) + 1
        return super().poll(min(limit, due - self._next))


def paced(task: Any, slot: int, slots: int) -> Paced:
    return Paced(task, slot, slots)


BATCH_SIZES: list[int] = []


def note_batch_size(event: dict[str, Any]) -> None:
    BATCH_SIZES.append(len(event["batch"]))


def same(segment: dict[str, Any]) -> dict[str, Any]:
    return segment


CLOSED: list[dict[str, Any]] = []
"""The windows ``closed`` has seen emitted, in this process."""
ENDED_BY: list[str] = []


class FallsSilent(MemoryInput):
    """The memory input, which after its segments reads nothing and stays open until a window
    has closed (or, failing that, ``params.give_up`` seconds have passed), noting which."""

    def __init__(self, task: Any, slot: int, slots: int) -> None:
        count = task.params["count"]
        super().__init__(task, lambda i: {"n": i}, count, slot, slots)
        self.give_up = time.monotonic() + task.params["give_up"]

    def completed(self) -> bool:
        if len(CLOSED) >= 2:
            ENDED_BY.append("windows closed")
            return True
        if time.monotonic() >= self.give_up:
            ENDED_BY.append("gave up")
            return True
        return False


def falls_silent(task: Any, slot: int, slots: int) -> FallsSilent:
    return FallsSilent(task, slot, slots)


def closed(event: dict[str, Any]) -> dict[str, Any]:
    row = {"start": event["start"], "end": event["end"], "count": event["value"]}
    CLOSED.append(row)
    return row
