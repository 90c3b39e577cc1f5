"""A task's one source of nondeterminism: the clock, randomness and timer checks go through its
Recorder, which logs what they gave, and gives the logged values again while a replacement
replays.

A replacement must make the failed task's choices again, in the same order, or its state and
output diverge from what the downstreams already hold. Live, the recorder reads the real clock
or random source and appends the value to the task's determinant log; replaying, it hands out
the queued logged events instead and appends them to the log, so the replacement's log ends up
the failed task's. A replay that asks for something the log does not hold next has diverged:
``ReplayDiverged`` says what was expected and what was found, and recovery falls back to global
rollback.

User code reaches the recorder through ``peer.context`` while the task runs it (``active``).
"""

from __future__ import annotations

import random as _random
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from peer.causal.determinants import CLOCK, KINDS, RANDOM, TICK, DeterminantLog, Event, event


class ReplayDiverged(RuntimeError):
    """A replay asked for an event the log does not hold next."""


class _Current(threading.local):
    recorder: Recorder | None = None


_current = _Current()


def current() -> Recorder | None:
    """The recorder of the task running on this thread, if any."""
    return _current.recorder


class Recorder:
    """A task's clock, randomness and timer checks, logged to ``log`` (see the module)."""

    def __init__(self, log: DeterminantLog, rng: _random.Random | None = None) -> None:
        self.log = log
        self.rng = rng if rng is not None else _random.Random()
        self._queue: deque[Event] = deque()

    @property
    def replaying(self) -> bool:
        return bool(self._queue)

    def replay(self, events: Iterable[Any]) -> None:
        """Queue logged events (a failed task's, as its downstreams held them) to be given out
        again in order; each is checked first, since they come from other processes."""
        checked = [event(e) for e in events]
        self._queue.extend(checked)

    def peek(self) -> Event | None:
        """The next logged event to replay; None when live."""
        return self._queue[0] if self._queue else None

    def next_is(self, kind: int) -> bool:
        """Whether the next logged event to replay is of ``kind``: where the replay may make
        that choice now."""
        return self.next_of(kind) is not None

    def next_of(self, kind: int) -> Event | None:
        """The next logged event to replay, if it is of ``kind``; None otherwise."""
        found = self._queue[0] if self._queue else None
        return found if found is not None and found[0] == kind else None

    def consume(self, kind: int) -> Event:
        """The next logged event, which must be of ``kind``; appended to the log again."""
        found = self._queue[0] if self._queue else None
        if found is None or found[0] != kind:
            what = "nothing" if found is None else f"{KINDS[found[0]]} {found[1]!r:.80}"
            raise ReplayDiverged(f"replay expected a {KINDS.get(kind, kind)} event, found {what}")
        self._queue.popleft()
        self.log.append(found)
        return found

    def record(self, raw: Any) -> None:
        """Log a live event. While replaying every event must come from the log (``consume``):
        a new one would make the rebuilt log differ, so that is a divergence."""
        if self._queue:
            waiting = len(self._queue)
            raise ReplayDiverged(
                f"a live event {raw!r:.80} came while {waiting} logged events wait to be replayed"
            )
        self.log.append(event(raw))

    def _read(self, kind: int, live: Any) -> float:
        if self._queue:
            return self.consume(kind)[1]
        value = float(live())
        self.log.append((kind, value))
        return value

    def now(self) -> float:
        """Seconds since the epoch, as ``time.time()``; the logged one while replaying."""
        return self._read(CLOCK, time.time)

    def random(self) -> float:
        """A float in [0, 1), from the task's random source; the logged one while replaying."""
        return self._read(RANDOM, self.rng.random)

    def tick(self) -> float:
        """The time a processing-time timer check reads: when the timers fired is a choice the
        replacement must make again."""
        return self._read(TICK, time.time)

    @contextmanager
    def active(self) -> Iterator[Recorder]:
        """This recorder is the one ``peer.context`` uses on this thread, until the block ends
        (nestable: the previous one comes back)."""
        previous = _current.recorder
        _current.recorder = self
        try:
            yield self
        finally:
            _current.recorder = previous
