"""Stream joins: a task that pairs the rows of two upstream tasks by key (peer.job.spec.Join).

Rows reach the join's task by their own side's key (peer.runtime.routing), so equal keys of
both sides meet in one slot, and the task's inbox keeps the side each batch came from
(peer.runtime.inbox.SidedInbox). Each side's rows are held per key in the slot's keyed state
(peer.state.keyed), as the engine's states ``@join ID ...``: snapshotted with what changed,
restored and moved between slots by key group, like windows' state.

The type of the join is chosen once, when the task starts:

- ``window``: a row goes into every extent of the fixed or sliding window its time falls in;
  when the watermark passes an extent's end, each left row of the extent is paired with each
  right row of it, key by key, and the extent is forgotten.
- ``interval``: a left row at time ``t`` pairs with the right rows whose time is within
  ``[t + lower, t + upper]`` (or ``[t + lower, until]``, ``until`` a field of the left row), both
  ends included; a pair goes out when its second row comes. A watermark's sweep forgets the
  rows no row still to come could pair with (left rows whose interval ends before it, right
  rows before it plus ``lower``), once as many rows have come since the last sweep as it kept.
- ``regular``: every pair of rows with equal keys, as soon as the second comes; a key's rows of
  one side are forgotten ``ttl`` of event time after that side's last row for it.

Event time. A row whose time is below the watermark is late: it is dropped, never paired, and
counted in ``onyx_window_late_segments_total`` under the join's id, and sent as it came to the
join's side output if it names one (``late``). (A regular join without time fields takes every
row.) Every join's state may also expire after ``ttl`` of event time.

Keys. A row's key is its side's key field (or the list of its key fields); a row without one
fails the task, naming the task and the field. A null key equals nothing, as in SQL: its row
pairs with none. The two sides' keys must be of one type: 1 and "1" are not equal and go to
different key groups, so a key of another type than the other side's fails the task, naming
the job, the task, the join and both key fields.

Order. Rows are taken in the order their batches were taken, which a replacement replaying the
task's seat takes again (peer.runtime.causal), and each row pairs with the other side's rows in
the order they came: the same input gives the same pairs in the same order. Nothing here reads a
clock or iterates a set.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from peer.job.imports import resolve
from peer.job.spec import Job, Join, Window
from peer.metrics import LATE_SEGMENTS
from peer.state.backends import Entry
from peer.state.keyed import Declared, KeyedState, Ttl
from peer.state.task_state import KeyNames
from peer.state.windows import extents
from peer.values.columnar import FieldKey, Late, Sided, collect, rows
from peer.values.limits import cut

Found = list[dict[str, Any]]
"""Pairs found, in the order found, each as the event its join's ``emit`` is given: ``{"join",
"key", "left", "right"}``, and the extent's ``"start"`` and ``"end"`` for a window join."""


class Pairs(Protocol):
    """How one type of join holds its rows and finds their pairs."""

    def add(self, side: int, key: Any, name: str, t: Any, row: Any) -> None:
        """Take ``row`` of ``side`` (0 left, 1 right), at event time ``t``, for ``key`` (whose
        canonical text is ``name``), adding the pairs it completes to ``found``."""

    found: Found
    """The pairs rows completed since the caller last took them."""

    def close(self, mark: float) -> Iterator[Found]:
        """The pairs the watermark ``mark`` completes, a list per key, as read; it forgets what
        no row still to come could pair with."""


class Held:
    """A state the join keeps per key in the slot's keyed state."""

    def __init__(self, keyed: KeyedState, name: str, join: Join) -> None:
        self.keyed = keyed
        self.declared: Declared = keyed.engine_state(
            name, None if join.ttl is None else Ttl(join.ttl, "event")
        )

    def get(self, key: Any, name: str) -> Entry | None:
        """Make ``key`` current: its live entry, if any."""
        self.keyed.at_held(key, name)
        return self.keyed.entry(self.declared)

    def put(self, entry: Entry | None, value: Any) -> None:
        """Keep ``value`` for the current key: ``entry``'s, changed in place, or a new one. It
        lives its ttl from now."""
        keyed = self.keyed
        if entry is not None and entry[1] is value:
            entry[2] = keyed.expiry(self.declared)
            keyed.rewrite(self.declared, entry)
        else:
            keyed.write(self.declared, value)

    def each(self) -> Iterator[tuple[str, Entry]]:
        """Every key's live entry, by canonical text, as read."""
        now = self.keyed.now(self.declared)
        return ((name, entry) for name, entry in self.keyed.each(self.declared)
                if entry[2] > now)  # fmt: skip

    def keep(self, name: str, entry: Entry, value: Any) -> None:
        """Keep ``value`` for the key of ``entry`` (read by ``each``), or forget the key when
        ``value`` is empty. What a watermark leaves is not written anew: it expires when it
        would have."""
        keyed = self.keyed
        keyed.at_held(entry[0], name)
        if value:
            entry[1] = value
            keyed.rewrite(self.declared, entry)
        else:
            keyed.clear(self.declared)


class WindowPairs:
    """A window join: per key, ``{start: [start, end, lefts, rights]}`` for each extent."""

    def __init__(self, join: Join, keyed: KeyedState) -> None:
        self.found: Found = []
        self.id = join.id
        self.held = Held(keyed, f"join {join.id}", join)
        self.window = Window(join.id, join.task, "fixed" if join.slide is None else "sliding",
                             "collect", range=join.range, slide=join.slide)  # fmt: skip
        self.first_end = -math.inf
        """No extent held ends before this (peer.state.task_state.WindowState's)."""

    def add(self, side: int, key: Any, name: str, t: Any, row: Any) -> None:
        held = self.held
        entry = held.get(key, name)
        slots: dict[Any, list[Any]] = {} if entry is None else entry[1]
        for start, end in extents(self.window, t):
            slot = slots.get(start)
            if slot is None:
                slot = slots[start] = [start, end, [], []]
                self.first_end = min(self.first_end, end)
            slot[2 + side].append(row)
        held.put(entry, slots)

    def close(self, mark: float) -> Iterator[Found]:
        if mark < self.first_end:
            return
        held, least = self.held, math.inf
        for name, entry in held.each():
            slots = entry[1]
            ended = sorted(start for start, slot in slots.items() if slot[1] <= mark)
            if len(ended) < len(slots):
                least = min(least, *(slot[1] for slot in slots.values() if slot[1] > mark))
            if not ended:
                continue
            found: Found = []
            for start in ended:
                _, end, lefts, rights = slots.pop(start)
                found += [{"join": self.id, "key": entry[0], "left": left, "right": right,
                           "start": start, "end": end}
                          for left in lefts for right in rights]  # fmt: skip
            held.keep(name, entry, slots)
            yield found
        self.first_end = least


class IntervalPairs:
    """An interval join: per key, the left rows as ``[from, to, row]`` (the times of right rows
    they pair with, both included) and the right rows as ``[t, row]``."""

    def __init__(self, join: Join, keyed: KeyedState, where: str) -> None:
        self.found: Found = []
        self.id = join.id
        self.sides = (Held(keyed, f"join {join.id} left", join),
                      Held(keyed, f"join {join.id} right", join))  # fmt: skip
        self.lower = join.lower or 0
        self.upper, self.until, self.where = join.upper, join.until, where
        self.added = 0
        """Rows taken since the last sweep."""
        self.kept = 0
        """Rows the last sweep kept: the next waits for as many more, so that sweeping costs
        each row a constant share, and the rows held are at most twice those still needed."""

    def add(self, side: int, key: Any, name: str, t: Any, row: Any) -> None:
        left, right = self.sides
        self.added += 1
        if side == 0:
            start, end = t + self.lower, self._end(t, row)
            entry = right.get(key, name)
            if entry is not None:
                self.found += [{"join": self.id, "key": key, "left": row, "right": r}
                               for tr, r in entry[1] if start <= tr <= end]  # fmt: skip
            entry = left.get(key, name)
            held = [] if entry is None else entry[1]
            held.append([start, end, row])
            left.put(entry, held)
        else:
            entry = left.get(key, name)
            if entry is not None:
                self.found += [{"join": self.id, "key": key, "left": held, "right": row}
                               for start, end, held in entry[1] if start <= t <= end]  # fmt: skip
            entry = right.get(key, name)
            held = [] if entry is None else entry[1]
            held.append([t, row])
            right.put(entry, held)

    def _end(self, t: Any, row: Any) -> Any:
        if self.upper is not None:
            return t + self.upper
        return time_in(row, self.until, f"{self.where}: a left row's until")  # type: ignore[arg-type]

    def close(self, mark: float) -> Iterator[Found]:
        """Left rows whose interval ends before ``mark`` pair with no right row still to come
        (those come at ``mark`` or after), nor do right rows before ``mark + lower`` with any
        left row still to come: a sweep forgets them, once as many rows have come since the
        last as it kept (a row past its time that is still held pairs with nothing, since each
        pair's times are checked)."""
        if self.added < self.kept:
            return
        self.added = self.kept = 0
        left, right = self.sides
        yield from self._sweep(left, 1, mark)  # a left row's [from, to, row]: its to
        yield from self._sweep(right, 0, mark + self.lower)  # a right row's [t, row]: its t

    def _sweep(self, side: Held, at: int, first: float) -> Iterator[Found]:
        """Keep of each key's rows of ``side`` those whose item ``at`` is ``first`` or after,
        counting them; nothing found, a list per key read."""
        for name, entry in side.each():
            kept = [held for held in entry[1] if held[at] >= first]
            if len(kept) < len(entry[1]):
                side.keep(name, entry, kept)
            self.kept += len(kept)
            yield []


class RegularPairs:
    """A regular join: per key, each side's rows as they came."""

    def __init__(self, join: Join, keyed: KeyedState) -> None:
        self.found: Found = []
        self.id = join.id
        self.sides = (Held(keyed, f"join {join.id} left", join),
                      Held(keyed, f"join {join.id} right", join))  # fmt: skip

    def add(self, side: int, key: Any, name: str, t: Any, row: Any) -> None:
        other = self.sides[1 - side].get(key, name)
        if other is not None:
            self.found += ([{"join": self.id, "key": key, "left": row, "right": r}
                            for r in other[1]] if side == 0 else
                           [{"join": self.id, "key": key, "left": r, "right": row}
                            for r in other[1]])  # fmt: skip
        own = self.sides[side]
        entry = own.get(key, name)
        held = [] if entry is None else entry[1]
        held.append(row)
        own.put(entry, held)

    def close(self, mark: float) -> Iterator[Found]:
        """Nothing: a key's rows go when their ttl runs out."""
        return iter(())


def time_in(row: Any, field: str, what: str) -> Any:
    """``row[field]``, a time: a row without it, or with another value, is a ValueError that
    says ``what`` it is."""
    try:
        t = row[field]
    except (KeyError, TypeError, IndexError):
        raise ValueError(f"{what} {field!r} is missing: {cut(repr(row), 200)}") from None
    if not isinstance(t, int | float) or isinstance(t, bool):
        raise ValueError(f"{what} {field!r} is {t!r}, not a number")
    return t


def pairs_for(join: Join, keyed: KeyedState, where: str) -> Pairs:
    """The join's type, chosen once."""
    if join.type == "window":
        return WindowPairs(join, keyed)
    if join.type == "interval":
        return IntervalPairs(join, keyed, where)
    return RegularPairs(join, keyed)


class JoinPart:
    """A join's task part: it takes what the task received (a ``Sided`` batch) and sends the
    pairs' segments. It has the methods of a task's windows (peer.runtime.task_windows), whose
    place it takes: a join's task has no windows."""

    def __init__(self, job: Job, task: str, keyed: KeyedState) -> None:
        join = job.join_of(task)
        if join is None:
            raise ValueError(f"task {task!r} makes no join")
        self.where = f"job {job.id!r}, task {task!r}, join {join.id!r}"
        self.join, self.keyed = join, keyed
        self.keys = (FieldKey(join.left_key, task), FieldKey(join.right_key, task))
        self.times = (join.left_time, join.right_time)
        self.whats = (f"{self.where}: a left row's time", f"{self.where}: a right row's time")
        self.emit: Callable[[dict[str, Any]], Any] | None = (
            None if join.emit is None else resolve(join.emit)
        )
        self.pairs = pairs_for(join, keyed, self.where)
        self.mark = -math.inf
        """The highest watermark seen: rows with times below it are late."""
        self.late = LATE_SEGMENTS.labels(job.id or "", task, join.id)
        self.kinds: list[type | None] = [None, None]
        """The type of the first key each side had."""

    def apply(self, out: Sided, clock: object) -> list[Any]:
        names, add, kinds = KeyNames(), self.pairs.add, self.kinds
        mark, whats = self.mark, self.whats
        late: list[Late] = []
        side_output = self.join.late
        for side, batch in out.parts:
            key_of, field = self.keys[side], self.times[side]
            for row in rows(batch):
                key = key_of(row)
                if key is None:
                    continue
                if kinds[side] is not type(key):
                    self._kind(side, key)
                t = None if field is None else time_in(row, field, whats[side])
                if t is not None and t < mark:
                    self.late.inc()
                    if side_output is not None:
                        late.append(Late(side_output, row))
                    continue
                add(side, key, names.of(key), t, row)
        found, self.pairs.found = self.pairs.found, []
        return self._sent(found) + late if late else self._sent(found)

    def _kind(self, side: int, key: Any) -> None:
        """A side's key of another type than the first it had: it must be the other side's."""
        kinds = self.kinds
        if kinds[side] is None:
            kinds[side] = type(key)
        other = kinds[1 - side]
        if other is not None and other is not type(key):
            left, right = (type(key), other) if side == 0 else (other, type(key))
            raise ValueError(f"{self.where}: left_key {self.join.left_key!r} is "
                             f"{left.__name__} and right_key {self.join.right_key!r} is "
                             f"{right.__name__}: keys of unequal types never match")  # fmt: skip

    def _sent(self, found: Found) -> list[Any]:
        emit = self.emit
        return found if emit is None else collect(list(map(emit, found)))

    def due(self, clock: object) -> list[Any]:
        return []

    def due_at(self) -> float:
        """A join has no timers."""
        return math.inf

    def watermark(self, mark: float) -> Iterator[list[Any]]:
        """The pairs ``mark`` completes, a list per key, as read."""
        if mark <= self.mark:
            return iter(())
        self.mark = mark
        self.keyed.tick(0.0, mark)
        return (self._sent(found) for found in self.pairs.close(mark))

    def finish(self) -> Iterator[list[Any]]:
        return self.watermark(math.inf)

    def snapshot(self) -> dict[str, Any]:
        """The watermark: the rows are in the keyed state."""
        return {"watermark": self.mark}

    def restore(self, states: list[Any], keep: Any) -> None:
        for state in states:
            self.mark = max(self.mark, state["watermark"])
        self.keyed.tick(0.0, self.mark)

    def timers(self) -> list[list[float]]:
        return []

    def restore_timers(self, timers: list[list[float]]) -> None:
        """A join has no timers."""
