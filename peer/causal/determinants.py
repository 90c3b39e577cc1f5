"""Determinants: the nondeterministic choices a task made, logged so a replacement makes them
again, and the bookkeeping that carries them downstream.

A task's outcome depends on its state, its input and a few choices no input fixes: which
upstream it took batches from and how many (its inboxes' order is the network's), what its code
read from the clock and from randomness, and when a processing-time timer was checked. Each
choice is an event ``(kind, value)``:

- ``(TAKE, ((seat, n_items), ...))``: items taken from each upstream, in the order taken;
- ``(CLOCK, seconds)``, ``(RANDOM, value)``, ``(TICK, seconds)``: what the clock, the random
  source or a timer check gave;
- ``(BARRIER, epoch)``: the task passed that epoch's barrier, which tells where each epoch's
  determinants end so they can be dropped when it commits;
- ``(END, 0)``: the task found its input over and ended it (flushing its fn and windows), which
  a barrier that came at the same time may precede or follow.

A task keeps its own events since its last commit (``DeterminantLog``) and sends them downstream
as deltas (``Deltas``): a replacement cannot ask a dead task for its log, but it can ask the
tasks the dead one sent to. Each downstream keeps what it gets (``Holdings``) and forwards it on,
up to the number of concurrent failures the job covers, since a downstream that fails with its
upstream takes its copy with it. Offsets are absolute, counted from the allocation's start, so a
delta says where it continues a copy whatever was dropped at either end.

Events cross processes as msgpack, where tuples become lists: every entry point takes lists too
and checks the shape (``event``), since a malformed event must not crash a peer serving others.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

TAKE = 0
CLOCK = 1
RANDOM = 2
TICK = 3
BARRIER = 4
END = 5
KINDS = {
    TAKE: "take",
    CLOCK: "clock",
    RANDOM: "random",
    TICK: "tick",
    BARRIER: "barrier",
    END: "end",
}
"""Each event kind's name, for messages."""

Event = tuple[int, Any]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _takes(value: Any) -> tuple[tuple[int, int], ...]:
    if not isinstance(value, list | tuple):
        raise ValueError(f"a take event's value {value!r:.80} is not a list of (seat, items)")
    takes = []
    for pair in value:
        if (not isinstance(pair, list | tuple) or len(pair) != 2 or not _is_int(pair[0])
                or not _is_int(pair[1]) or pair[0] < 0 or pair[1] < 1):  # fmt: skip
            raise ValueError(f"a take event's entry {pair!r:.80} is not (seat >= 0, items >= 1)")
        takes.append((pair[0], pair[1]))
    return tuple(takes)


def _reading(kind: int, value: Any) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        raise ValueError(f"a {KINDS[kind]} event's value {value!r:.80} is not a finite number")
    return float(value)


def _epoch(value: Any) -> int:
    if not _is_int(value) or value < 0:
        raise ValueError(f"a barrier event's epoch {value!r:.80} is not an integer >= 0")
    return value


def event(raw: Any) -> Event:
    """``raw`` as an event of tuples, checked: a ValueError naming what is wrong, since events
    come from other processes (as lists, after msgpack)."""
    if not isinstance(raw, list | tuple) or len(raw) != 2:
        raise ValueError(f"event {raw!r:.80} is not a (kind, value) pair")
    kind, value = raw
    if not _is_int(kind) or kind not in KINDS:
        raise ValueError(f"event {raw!r:.80} has no kind of {sorted(KINDS)}")
    if kind == TAKE:
        return (TAKE, _takes(value))
    if kind == BARRIER:
        return (BARRIER, _epoch(value))
    if kind == END:
        if value != 0 or not _is_int(value):
            raise ValueError(f"an end event's value {value!r:.80} is not 0")
        return (END, 0)
    return (kind, _reading(kind, value))


def events(raw: Any) -> list[Event]:
    """A list of events, each checked as ``event`` does."""
    if not isinstance(raw, list | tuple):
        raise ValueError(f"events {raw!r:.80} are not a list")
    return [event(e) for e in raw]


def _through(log: Sequence[Event], epoch: int) -> int:
    """How many events of ``log`` end with its last barrier of ``epoch`` or an earlier epoch: a
    commit of an epoch commits every one before it, so a log that missed a commit catches up."""
    for index in range(len(log) - 1, -1, -1):
        kind, value = log[index]
        if kind == BARRIER and value <= epoch:
            return index + 1
    return 0


class DeterminantLog:
    """A task's own events since its last committed barrier, at absolute offsets: ``start`` is
    the offset of the first held event, ``end`` one past the last."""

    def __init__(self, start: int = 0, events: Iterable[Any] = ()) -> None:
        if not _is_int(start) or start < 0:
            raise ValueError(f"a determinant log's start {start!r} is not an integer >= 0")
        self.start = start
        self._events: list[Event] = [event(e) for e in events]

    @property
    def end(self) -> int:
        return self.start + len(self._events)

    def append(self, own: Event) -> None:
        """One of the task's own events, made by its recorder (or checked when a replay queued
        it): no check here, as a task appends on every take and every clock read."""
        self._events.append(own)

    def since(self, offset: int) -> list[Event]:
        """The events from ``offset`` on: what a downstream holding up to ``offset`` lacks."""
        if not _is_int(offset) or not self.start <= offset <= self.end:
            raise ValueError(f"offset {offset!r} is outside the log's [{self.start}, {self.end}]")
        return self._events[offset - self.start :]

    def barrier_offset(self, epoch: int) -> int | None:
        """The offset just after ``(BARRIER, epoch)``: where a replay from that epoch's snapshot
        starts; None when the log does not hold it."""
        for index in range(len(self._events) - 1, -1, -1):
            if self._events[index] == (BARRIER, epoch):
                return self.start + index + 1
        return None

    def committed(self, epoch: int) -> None:
        """Drop every event up to and including the barrier of ``epoch`` (or of the latest
        earlier epoch held): a committed epoch is never replayed."""
        cut = _through(self._events, epoch)
        del self._events[:cut]
        self.start += cut

    def __repr__(self) -> str:
        return f"DeterminantLog(start={self.start}, end={self.end})"


@dataclass
class _Copy:
    """A held copy of one upstream's log. ``broken`` when a delta skipped part of it: the copy
    then restarts at that delta and is whole again once a commit drops through a barrier it
    holds (it then starts where the origin's own log does)."""

    start: int
    hops: int
    events: list[Event] = field(default_factory=list)
    broken: bool = False

    @property
    def end(self) -> int:
        return self.start + len(self.events)


class Holdings:
    """The logs a task keeps of the tasks upstream of it, by origin seat, so that when one of
    them fails its replacement can get back what it chose. ``depth`` is how many hops a log is
    kept at (the concurrent failures the job covers): a delta from further is ignored."""

    def __init__(self, depth: int) -> None:
        if not _is_int(depth) or depth < 1:
            raise ValueError(f"holdings' depth {depth!r} is not an integer >= 1")
        self.depth = depth
        self._copies: dict[int, _Copy] = {}

    def add(self, origin: int, offset: int, hops: int, events: Sequence[Any]) -> None:
        """One delta of ``origin``'s log: appended where it continues the held copy, an overlap
        skipped (it may come by more than one path), a gap (``offset`` past the held end) marks
        the copy broken and restarts it at ``offset``."""
        self._add(origin, offset, hops, _delta(origin, offset, hops, events))

    def _add(self, origin: int, offset: int, hops: int, new: list[Event]) -> None:
        if hops > self.depth:
            return
        copy = self._copies.get(origin)
        if copy is None:
            self._copies[origin] = _Copy(offset, hops, new)
            return
        copy.hops = min(copy.hops, hops)
        if offset > copy.end:
            copy.start, copy.events, copy.broken = offset, new, True
        elif offset + len(new) > copy.end:
            copy.events.extend(new[copy.end - offset :])

    def receive(self, deltas: Any) -> None:
        """Every delta of a message, as ``Deltas.for_downstream`` made them and msgpack carried
        them: ``[[origin, offset, hops, [events...]], ...]``; a ValueError for a wrong shape,
        with nothing added."""
        if not isinstance(deltas, list | tuple):
            raise ValueError(f"deltas {deltas!r:.80} are not a list")
        checked = []
        for delta in deltas:
            if not isinstance(delta, list | tuple) or len(delta) != 4:
                raise ValueError(f"delta {delta!r:.80} is not [origin, offset, hops, events]")
            checked.append((delta[0], delta[1], delta[2], _delta(*delta)))
        for origin, offset, hops, new in checked:
            self._add(origin, offset, hops, new)

    def committed(self, epoch: int) -> None:
        """Each copy drops through its barrier of ``epoch`` (or the latest earlier one held)."""
        for origin in sorted(self._copies):
            copy = self._copies[origin]
            cut = _through(copy.events, epoch)
            if cut:
                del copy.events[:cut]
                copy.start += cut
                copy.broken = False

    def recall(self, origin: int) -> tuple[int, list[Event]] | None:
        """The held copy of ``origin``'s log as (start offset, events); None when nothing is
        held or the copy is broken."""
        copy = self._copies.get(origin)
        if copy is None or copy.broken:
            return None
        return copy.start, list(copy.events)

    def hops(self, origin: int) -> int:
        """How far ``origin`` is: 1 for a direct upstream's own log; the fewest over paths."""
        copy = self._copies.get(origin)
        if copy is None:
            raise KeyError(f"no determinant log of seat {origin} is held")
        return copy.hops

    def origins(self) -> list[int]:
        return sorted(self._copies)

    def since(self, origin: int, offset: int) -> list[Event]:
        """The held events of ``origin`` from ``offset`` on (none when broken or not held)."""
        copy = self._copies.get(origin)
        if copy is None or copy.broken:
            return []
        return copy.events[max(offset - copy.start, 0) :]

    def span(self, origin: int) -> tuple[int, int] | None:
        """The offsets [start, end) of the held copy of ``origin``; None when nothing is held or
        the copy is broken."""
        copy = self._copies.get(origin)
        if copy is None or copy.broken:
            return None
        return copy.start, copy.end


def _delta(origin: Any, offset: Any, hops: Any, raw: Any) -> list[Event]:
    """The events of a delta, its numbers checked."""
    for name, value, least in (("origin", origin, 0), ("offset", offset, 0), ("hops", hops, 1)):
        if not _is_int(value) or value < least:
            raise ValueError(f"a delta's {name} {value!r:.80} is not an integer >= {least}")
    return events(raw)


class Deltas:
    """How far each downstream seat has been sent each log, so a message carries only what is
    new: determinants ride on every message, and resending whole logs would cost more than the
    data. ``own`` is this task's seat, ``depth`` the hops a log travels."""

    def __init__(self, own: int, depth: int) -> None:
        if not _is_int(depth) or depth < 1:
            raise ValueError(f"deltas' depth {depth!r} is not an integer >= 1")
        self.own = own
        self.depth = depth
        self._marks: dict[tuple[int, int], int] = {}

    def for_downstream(self, to: int, own: DeterminantLog, held: Holdings) -> list[list[Any]]:
        """What ``to`` has not been sent yet: this task's log at 1 hop, and each held log closer
        than ``depth`` hops at one more, as ``[[origin, offset, hops, [events...]], ...]``;
        the marks advance (the caller sends it on its next message to ``to``)."""
        out = []
        delta = self._next(to, self.own, own.start, own.end, 1)
        if delta:
            delta.append(own.since(delta[1]))
            out.append(delta)
        if self.depth == 1:
            return out  # a held log is one hop away already: it goes no further
        for origin in held.origins():
            hops = held.hops(origin)
            span = held.span(origin)
            if origin in (self.own, to) or hops >= self.depth or span is None:
                continue
            delta = self._next(to, origin, *span, hops + 1)
            if delta:
                delta.append(held.since(origin, delta[1]))
                out.append(delta)
        return out

    def _next(self, to: int, origin: int, start: int, end: int, hops: int) -> list[Any]:
        """[origin, offset, hops] of what ``to`` lacks of a log spanning [start, end), marked
        as sent; [] when it lacks nothing."""
        mark = max(self._marks.get((to, origin), start), start)
        if mark >= end:
            return []
        self._marks[(to, origin)] = end
        return [origin, mark, hops]

    def seen(self, to: int, origin: int, offset: int) -> None:
        """``to`` holds ``origin``'s log up to ``offset`` (it said so after a recall): the next
        delta starts there."""
        if not _is_int(offset) or offset < 0:
            raise ValueError(f"seat {to} holds seat {origin}'s log to {offset!r}, not an offset")
        self._marks[(to, origin)] = offset
