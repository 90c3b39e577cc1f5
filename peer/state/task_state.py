"""Every window of one task, held per group key and extent, and the triggers that fire them.

A task runner keeps one TaskState per task that has windows and tells it what happens: the
segments its fn returned (``apply``), a new watermark (``watermark``), the time (``tick``), the
end of its input (``finish``), a barrier (``snapshot``), a recovery (``restore``). Each call
returns the segments its triggers emitted, to be sent on like any other output. Nothing here reads
a clock or does I/O, and nothing iterates a set: the same calls give the same segments and the
same state on every peer.

An Arrow batch is taken as rows of only the columns the windows read: the group key's fields
(all of them for a key fn), each window's time field and aggregated field (every field for an
aggregation that takes whole segments, such as collect, or for a punctuation trigger).

Keys are held under their canonical JSON, the text ``peer.runtime.routing`` hashes, so a key made
of several fields (a list) works, and a key reads the same after a snapshot has turned its tuples
into lists.

Event time. A watermark W says no segment with an event time below W is still to come, so every
extent ending at or before W is complete: its watermark triggers fire it, then every window
forgets it. A segment that breaks the promise (t < W) is late. It is dropped from every window
with event time, and counted in ``late`` (once per window it misses), since taking it would bring
back an extent that was already emitted and forgotten. A global window has no event time: only
``finish`` closes it.

Order. ``apply`` goes segment by segment, window by window in job order, then trigger by trigger
in job order over the segment's extents, earliest first. Triggers that fire every extent
(timer, watermark) go window by window, trigger by trigger, key by canonical JSON, extent by
start. A discarding trigger forgets the extent it fired, so a trigger after it finds nothing to
fire and the extent's next segment starts it afresh (a session starts a new session).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from peer.job.spec import Job, Trigger, Window
from peer.job.values import canonical
from peer.state.aggregations import aggregation, fields_read
from peer.state.triggers import Armed, arm
from peer.state.windows import Extent, absorb, extents
from peer.values.columnar import Batch, FieldKey, rows, select
from peer.values.limits import cut


@dataclass(slots=True)
class ExtentState:
    """One extent's state, and per trigger of its window how many segments the extent has
    taken since that trigger last fired it."""

    state: Any
    counts: list[int]


@dataclass(slots=True)
class Held:
    """One group key, as the key function gave it, and its extents."""

    key: Any
    extents: dict[Extent, ExtentState]


class WindowState:
    """One window of the task: its state per key and extent, and its triggers."""

    def __init__(self, window: Window, triggers: list[Trigger], task: str) -> None:
        self.window = window
        self.aggregation = aggregation(window)
        self.triggers = [arm(trigger) for trigger in triggers]
        self.task = task
        self.held: dict[str, Held] = {}
        self.due: dict[int, float] = {}
        """When each timer trigger, by index, fires next."""
        self.per_segment = any(t.spec.on in ("segment", "punctuation") for t in self.triggers)
        """Whether a trigger looks at each segment as it comes."""

    def time(self, segment: Any) -> float | None:
        """The segment's event time; None in a global window, which has none. A segment
        without the window's key fails its task naming the window and the field."""
        if self.window.type == "global":
            return None
        try:
            return segment[self.window.key]
        except (KeyError, TypeError, IndexError):
            raise ValueError(
                f"window {self.window.id!r}: a segment has no time field {self.window.key!r}: "
                f"{cut(repr(segment), 200)}"
            ) from None

    def add(self, segment: Any, t: Any, key: Any, name: str) -> list[Any]:
        """Take ``segment``, at event time ``t``, into its extents for ``key``."""
        held = self.held.get(name)
        if held is None:
            held = self.held[name] = Held(key, {})
        window, agg = self.window, self.aggregation
        targets = [self._place(held, extent) for extent in extents(window, t)]
        for extent in targets:
            slot = held.extents[extent]
            update = agg.create_state_update(window, slot.state, segment)
            slot.state = agg.apply_state_update(window, slot.state, update)
            counts = slot.counts
            for index in range(len(counts)):
                counts[index] += 1
        return self._on_segment(segment, name, targets) if self.per_segment else []

    def close(self, watermark: float) -> list[Any]:
        """Fire the extents ending at or before ``watermark`` and forget them."""
        out: list[Any] = []
        ended = sorted(
            (name, extent)
            for name, held in self.held.items()
            for extent in held.extents
            if extent[1] <= watermark
        )  # in the order of _everything, without sorting what stays open
        for index, trigger in enumerate(self.triggers):
            if trigger.spec.on == "watermark":
                out += self._fire_each(trigger, index, ended)
        for name, extent in ended:
            if self._slot(name, extent) is not None:
                self._forget(name, extent)
        return out

    def tick(self, now: float) -> list[Any]:
        """Fire every extent for each timer trigger whose period has passed since it last
        fired (or since the first call, for its first period)."""
        out: list[Any] = []
        for index, trigger in enumerate(self.triggers):
            if trigger.spec.on != "timer":
                continue
            period: float = trigger.spec.period  # type: ignore[assignment]
            if now < self.due.setdefault(index, now + period):
                continue
            self.due[index] = now + period
            out += self._fire_each(trigger, index, self._everything())
        return out

    def due_at(self) -> float:
        """When this window's next timer trigger is due (see TaskState.due_at)."""
        due = math.inf
        for index, trigger in enumerate(self.triggers):
            if trigger.spec.on == "timer":
                due = min(due, self.due.get(index, -math.inf))
        return due

    def snapshot(self) -> list[Any]:
        """``[[key, [[start, end, state, counts], ...]], ...]``, in the order triggers fire."""
        return [[self.held[name].key, self._saved(name)] for name in sorted(self.held)]

    def _saved(self, name: str) -> list[Any]:
        slots = self.held[name].extents
        return [[*extent, slots[extent].state, slots[extent].counts] for extent in sorted(slots)]

    def restore(self, snapshot: list[Any], keep: Callable[[Any], bool]) -> None:
        """Merge in a snapshot's keys that ``keep`` accepts: where an extent is held already
        (or, for sessions, overlaps one held) the states are merged."""
        for key, held_extents in snapshot:
            if not keep(key):
                continue
            held = self.held.setdefault(canonical(key), Held(key, {}))
            for start, end, state, counts in held_extents:
                extent = self._place(held, (start, end))
                held.extents[extent] = self._combine(
                    [held.extents[extent], ExtentState(state, counts)]
                )

    # -- state ----------------------------------------------------------------------------------

    def _place(self, held: Held, extent: Extent) -> Extent:
        """The extent that state for ``extent`` goes to, made if need be: for a session, the
        session it joins, with every session it overlaps merged in."""
        if self.window.type == "session":
            merge = absorb(held.extents, extent)
            parts = [held.extents.pop(old) for old in merge.merged]
            extent = merge.extent
            if len(parts) == 1:  # the one session it falls in or extends: its slot as it is
                held.extents[extent] = parts[0]
            else:
                held.extents[extent] = self._combine(parts) if parts else self._new()
        elif extent not in held.extents:
            held.extents[extent] = self._new()
        return extent

    def _new(self) -> ExtentState:
        return ExtentState(self.aggregation.init(self.window), [0] * len(self.triggers))

    def _combine(self, slots: list[ExtentState]) -> ExtentState:
        merge = functools.partial(self.aggregation.merge, self.window)
        state = functools.reduce(merge, (slot.state for slot in slots))
        return ExtentState(
            state, [sum(counts) for counts in zip(*(s.counts for s in slots), strict=True)]
        )

    def _slot(self, name: str, extent: Extent) -> ExtentState | None:
        held = self.held.get(name)
        return None if held is None else held.extents.get(extent)

    def _forget(self, name: str, extent: Extent) -> None:
        held = self.held[name]
        del held.extents[extent]
        if not held.extents:
            del self.held[name]

    def _everything(self) -> list[tuple[str, Extent]]:
        """Every (key, extent) held, keys in canonical order, extents earliest first."""
        return [(name, extent) for name in sorted(self.held) for extent in self._extents(name)]

    def _extents(self, name: str) -> list[Extent]:
        return sorted(self.held[name].extents)

    # -- firing ---------------------------------------------------------------------------------

    def _on_segment(self, segment: Any, name: str, targets: list[Extent]) -> list[Any]:
        """Segment and punctuation triggers, after ``segment`` went into ``targets``."""
        out: list[Any] = []
        for index, trigger in enumerate(self.triggers):
            on = trigger.spec.on
            if on == "segment":
                threshold: int = trigger.spec.threshold  # type: ignore[assignment]
                due = [e for e in targets if self._count(name, e, index) >= threshold]
            elif on == "punctuation" and trigger.predicate(segment):  # type: ignore[misc]
                due = targets
            else:
                continue
            out += self._fire_each(trigger, index, [(name, extent) for extent in due])
        return out

    def _count(self, name: str, extent: Extent, index: int) -> int:
        """Segments the extent took since the trigger at ``index`` last fired it."""
        slot = self._slot(name, extent)
        return 0 if slot is None else slot.counts[index]

    def _fire_each(self, trigger: Armed, index: int, due: list[tuple[str, Extent]]) -> list[Any]:
        """Fire each (key, extent) still held; a discarding trigger then forgets it."""
        out: list[Any] = []
        for name, extent in due:
            slot = self._slot(name, extent)
            if slot is None:
                continue
            slot.counts[index] = 0
            value = self.aggregation.value(slot.state)
            out += trigger.fire(self.task, self.held[name].key, extent, value)
            if trigger.spec.refinement == "discarding":
                self._forget(name, extent)
        return out


class TaskState:
    """Every window of ``task``. ``key_of`` gives a segment's group key (None for a task that
    does not group: every segment then has the key None)."""

    def __init__(self, job: Job, task: str, key_of: Callable[[Any], Any] | None) -> None:
        self.key_of = key_of
        self.windows = [
            WindowState(window, [t for t in job.triggers if t.window == window.id], task)
            for window in job.windows
            if window.task == task
        ]
        self.mark = -math.inf
        """The highest watermark seen: event times below it are late."""
        self.late = 0
        """Segments dropped as late, once per window they missed."""
        self.reads = _fields_read(key_of, self.windows)
        """The fields the windows read of a segment; None for all of them."""

    def apply(self, segments: Batch, now: float) -> list[Any]:
        """Take ``segments`` into every window; segment and punctuation triggers fire as they
        go, then timer triggers that are due (as ``tick``)."""
        if not isinstance(segments, list):
            segments = rows(segments if self.reads is None else select(segments, self.reads))
        out: list[Any] = []
        names = _Names()
        for segment in segments:
            key = None if self.key_of is None else self.key_of(segment)
            name = names.of(key)
            for window in self.windows:
                t = window.time(segment)
                if t is not None and t < self.mark:
                    self.late += 1
                    continue
                out += window.add(segment, t, key, name)
        return out + self.tick(now)

    def watermark(self, watermark: float) -> list[Any]:
        """Fire and forget every extent that ends at or before ``watermark``."""
        if watermark <= self.mark:
            return []
        self.mark = watermark
        return [segment for window in self.windows for segment in window.close(watermark)]

    def tick(self, now: float) -> list[Any]:
        return [segment for window in self.windows for segment in window.tick(now)]

    def timers(self) -> list[list[float]]:
        """When each armed timer trigger is due next, ``[[window, trigger, due], ...]`` by
        index: what a seat's replacement needs to fire its timers where the seat did."""
        return [[w, index, due] for w, window in enumerate(self.windows)
                for index, due in sorted(window.due.items())]  # fmt: skip

    def restore_timers(self, timers: list[list[float]]) -> None:
        for w, index, due in timers:
            self.windows[int(w)].due[int(index)] = due

    def due_at(self) -> float:
        """When the next timer trigger is due: -inf while one has not been armed by a first
        tick, +inf without timer triggers. A runner ticks only once it is due, so a job that
        logs its clock reads logs one per firing, not one per round."""
        return min((window.due_at() for window in self.windows), default=math.inf)

    def finish(self) -> list[Any]:
        """The input is over: a watermark of +inf, which closes global windows too."""
        return self.watermark(math.inf)

    def snapshot(self) -> dict[str, Any]:
        """Plain data for msgpack, which carries the infinite bounds of global extents and of the
        watermark before the first one (JSON does not). It shares the states held: pack it
        before the next call."""
        windows = {window.window.id: window.snapshot() for window in self.windows}
        return {"watermark": self.mark, "windows": windows}

    def restore(self, snapshots: list[Any], keep: Callable[[Any], bool]) -> None:
        """Merge the snapshots of every slot of an earlier allocation, keeping the keys ``keep``
        accepts. The watermark is the highest of theirs: no extent any of them forgot comes
        back."""
        for snapshot in snapshots:
            self.mark = max(self.mark, snapshot["watermark"])
            for window in self.windows:
                window.restore(snapshot["windows"][window.window.id], keep)


class _Names:
    """Keys' canonical JSON for one batch, made once per distinct string or integer key (a
    visitor's views come together). Other keys are made each time: floats that are equal can
    differ in JSON (``0.0`` and ``-0.0``), and lists cannot be looked up."""

    def __init__(self) -> None:
        self.known: dict[tuple[type, Any], str] = {}

    def of(self, key: Any) -> str:
        kind = type(key)
        if kind not in _MEMO_KINDS:
            return canonical(key)
        slot = (kind, key)  # by type too: 1 and True are equal, their JSON is not
        name = self.known.get(slot)
        if name is None:
            name = self.known[slot] = canonical(key)
        return name


_MEMO_KINDS = frozenset({str, int, bool, type(None)})


def _fields_read(
    key_of: Callable[[Any], Any] | None, windows: list[WindowState]
) -> list[str] | None:
    """What the key and every window read of a segment, in order; None when one of them may
    read any field."""
    if key_of is not None and not isinstance(key_of, FieldKey):
        return None
    reads = list(key_of.names) if key_of is not None else []
    for window in windows:
        key = window.window.key  # None only in a global window, once validated
        if window.window.type != "global" and key is not None:
            reads.append(key)
        needed = fields_read(window.window)
        if needed is None or any(t.spec.on == "punctuation" for t in window.triggers):
            return None
        reads += needed
    return list(dict.fromkeys(reads))
