"""Every window of one task, held per group key and extent, and the triggers that fire them.

A task runner keeps one TaskState per task that has windows and tells it what happens: the
segments its fn returned (``apply``), a new watermark (``watermark``), the time (``tick``), the
end of its input (``finish``), a barrier (``snapshot``), a recovery (``restore``). Each call
returns the segments its triggers emitted, to be sent on like any other output (a watermark and
the end, a list per key closed, read as they are taken). Nothing here reads
a clock or does I/O, and nothing iterates a set: the same calls give the same segments and the
same state on every peer.

An Arrow batch is taken by its columns where every window of the task allows it and the batch's
columns do (peer.state.window_columns): each key's share of each extent aggregated at once and
merged in, which leaves the state the rows one by one would. Otherwise it is taken as rows of
only the columns the windows read: the group key's fields (all of them for a key fn), each
window's time field and aggregated field (every field for an aggregation that takes whole
segments, such as collect, or for a punctuation trigger).

Keys are held under their canonical JSON, the text ``peer.runtime.routing`` hashes, so a key made
of several fields (a list) works, and a key reads the same after a snapshot has turned its tuples
into lists. A key's extents are plain data, its slots by start: a keyed task's windows keep them
in the slot's keyed state (``KeyedExtents``), per key group on the job's backend; a task that
does not group keeps them in a dict of its own (``HeapExtents``), whole in every snapshot.

Event time. A watermark W says no segment with an event time below W is still to come, so every
extent ending at or before W is complete: its watermark triggers fire it, then every window
forgets it. A window keeps a bound below every end it holds, so a watermark short of it reads no
key (sliding and fixed windows end together, every ``slide`` or ``range``). A segment that
breaks the promise (t < W) is late. It is dropped from every window with event time, and counted
in ``late`` (once per window it misses), since taking it would bring back an extent that was
already emitted and forgotten; a window that names a side output (``late``) sends it there, as
it came. A global window has no event time: only ``finish`` closes it.

Order. ``apply`` goes segment by segment, window by window in job order, then trigger by trigger
in job order over the segment's extents, earliest first. Where no window emits as segments come
(no segment or punctuation trigger, no side output for late rows) it takes each key's rows
together instead, in the order they came: keys are apart, so the state is the same, and each
key's slots are read and written once a batch rather than once a row. Timer triggers fire
every extent window by window, trigger by trigger, key by canonical JSON, extent by start; a
watermark closes the extents it ends window by window, key by canonical JSON, trigger by
trigger, extent by start, and gives what each key emitted as it reads the keys, so that its
runner can spread the close of a large state over many steps. A discarding trigger forgets the
extent it fired, so a trigger after it finds nothing to fire and the extent's next segment
starts it afresh (a session starts a new session).
"""

from __future__ import annotations

import functools
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from peer.job.spec import Job, Trigger, Window
from peer.job.values import canonical
from peer.metrics import LATE_SEGMENTS
from peer.state.aggregations import aggregation, fields_read
from peer.state.backends import Entry
from peer.state.keyed import KeyedState, Ttl
from peer.state.triggers import Armed, arm
from peer.state.window_columns import Taken, qualifies, shares
from peer.state.windows import Extent, absorb, extents
from peer.values.columnar import Batch, FieldKey, Late, rows, select
from peer.values.limits import cut

Slot = list[Any]
"""One extent's state: ``[start, end, state, counts]``, ``counts`` holding, per trigger of its
window, how many segments the extent has taken since that trigger last fired it."""

Slots = dict[float, Slot]
"""A key's slots by their extents' start (no two of a key's extents start alike): plain data, as
a snapshot and the disk backend hold them."""


class Extents(ABC):
    """Where one window keeps its slots per key (its canonical text ``name``)."""

    @abstractmethod
    def get(self, name: str, key: Any) -> Slots | None:
        """The key's slots (change them, then ``put`` them back), None for none."""

    @abstractmethod
    def put(self, name: str, key: Any, held: Slots) -> None:
        """Keep ``held`` as the key's slots."""

    @abstractmethod
    def drop(self, name: str, key: Any) -> None:
        """The key has no slot left."""

    @abstractmethod
    def everything(self) -> Iterator[tuple[str, Any, Slots]]:
        """Every key held, as (name, key, slots), by name, as they were when the first is read
        (a close changes them while it reads them)."""

    @abstractmethod
    def saved(self) -> list[Any]:
        """What a snapshot's header keeps of the window: ``[[key, [slot, ...]], ...]``, keys by
        name and each key's slots by start."""


class HeapExtents(Extents):
    """A window's slots in a dict of the task's own, whole in every snapshot's header: how a
    task that does not group keeps its windows, one state (for the key None) per slot, which
    a restore onto fewer slots merges."""

    def __init__(self) -> None:
        self.held: dict[str, tuple[Any, Slots]] = {}

    def get(self, name: str, key: Any) -> Slots | None:
        entry = self.held.get(name)
        return None if entry is None else entry[1]

    def put(self, name: str, key: Any, held: Slots) -> None:
        if name not in self.held:
            self.held[name] = (key, held)

    def drop(self, name: str, key: Any) -> None:
        del self.held[name]

    def everything(self) -> Iterator[tuple[str, Any, Slots]]:
        return iter([(name, key, held) for name, (key, held) in sorted(self.held.items())])

    def saved(self) -> list[Any]:
        return [[key, [held[start] for start in sorted(held)]]
                for _, (key, held) in sorted(self.held.items())]  # fmt: skip


class KeyedExtents(Extents):
    """A keyed task's window's slots in the slot's keyed state (peer.state.keyed), as the
    engine's state ``@window ID``: kept per key group on the job's state backend, snapshotted
    with what changed, restored by key group; nothing of it in the header."""

    def __init__(self, keyed: KeyedState, window: Window) -> None:
        self.keyed = keyed
        ttl = None if window.ttl is None else Ttl(window.ttl)
        self.declared = keyed.engine_state(f"window {window.id}", ttl)
        self.last: Entry | None = None
        """The entry ``get`` found last: ``put`` of the same slots writes it again."""

    def get(self, name: str, key: Any) -> Slots | None:
        keyed = self.keyed
        keyed.at_held(key, name)
        entry = self.last = keyed.entry(self.declared)
        return None if entry is None else entry[1]

    def put(self, name: str, key: Any, held: Slots) -> None:
        keyed, last = self.keyed, self.last
        keyed.at_held(key, name)
        if last is not None and last[1] is held:
            last[2] = keyed.expiry(self.declared)  # written now: it lives its ttl from now
            keyed.rewrite(self.declared, last)
        else:
            keyed.write(self.declared, held)

    def drop(self, name: str, key: Any) -> None:
        self.keyed.at_held(key, name)
        self.keyed.clear(self.declared)

    def everything(self) -> Iterator[tuple[str, Any, Slots]]:
        """Every key's slots, but those whose ttl has run out, read as they are taken."""
        now = self.keyed.now(self.declared)
        return ((name, entry[0], entry[1]) for name, entry in self.keyed.each(self.declared)
                if entry[2] > now)  # fmt: skip

    def saved(self) -> list[Any]:
        return []


Due = tuple[str, Any, Slots, Slot]
"""A slot a trigger is to fire: its key's name, the key, the key's slots, the slot."""


class WindowState:
    """One window of the task: its slots per key, in ``held``, and its triggers. A firing works
    on the slots it was handed, and puts them back when it changed them."""

    def __init__(
        self, window: Window, triggers: list[Trigger], task: str, held: Extents, job: str = ""
    ) -> None:
        self.window = window
        self.late = LATE_SEGMENTS.labels(job, task, window.id)
        """The segments it dropped as late, as a metric."""
        self.aggregation = aggregation(window)
        self.triggers = [arm(trigger) for trigger in triggers]
        self.task = task
        self.held = held
        self.due: dict[int, float] = {}
        """When each timer trigger, by index, fires next."""
        self.per_segment = any(t.spec.on in ("segment", "punctuation") for t in self.triggers)
        """Whether a trigger looks at each segment as it comes."""
        self.first_end = -math.inf
        """No extent held ends before this: a watermark below it closes none, and reads no
        key. Lowered as extents are made; set by each close that reads every key; unknown
        (-inf) until the first, since a restore or the keyed state may hold extents."""

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
        held = self.held.get(name, key)
        if held is None:
            held = {}
        targets = self._into(held, segment, t)
        self.held.put(name, key, held)
        return self._on_segment(segment, name, key, held, targets) if self.per_segment else []

    def add_each(self, segments: list[Any], key: Any, name: str, mark: float) -> int:
        """Take one key's ``segments``, in order, but those behind ``mark``; the key's slots
        read and written once. For a window no trigger of which looks at each segment, so that
        nothing is emitted as they go. How many were late."""
        held = self.held.get(name, key)
        if held is None:
            held = {}
        late = 0
        for segment in segments:
            t = self.time(segment)
            if t is not None and t < mark:
                late += 1
            else:
                self._into(held, segment, t)
        if late < len(segments):
            self.held.put(name, key, held)
        if late:
            self.late.inc(late)
        return late

    def _into(self, held: Slots, segment: Any, t: Any) -> list[Slot]:
        """``segment`` taken into the slots of its extents among ``held``: those slots."""
        window, agg = self.window, self.aggregation
        targets = [self._place(held, extent) for extent in extents(window, t)]
        for slot in targets:
            update = agg.create_state_update(window, slot[2], segment)
            slot[2] = agg.apply_state_update(window, slot[2], update)
            counts = slot[3]
            for index in range(len(counts)):
                counts[index] += 1
        return targets

    def close(self, watermark: float) -> Iterator[list[Any]]:
        """Fire the extents ending at or before ``watermark`` and forget them, key by key: what
        each key's extents emitted, one list per key that had any to close. It reads the keys
        as it goes, so a runner may spread the close of many keys over its steps."""
        if watermark < self.first_end:
            return
        fire = [(i, t) for i, t in enumerate(self.triggers) if t.spec.on == "watermark"]
        least = math.inf
        for name, key, held in self.held.everything():
            ended = [(name, key, held, held[start]) for start in sorted(held)
                     if held[start][1] <= watermark]  # fmt: skip
            if len(ended) < len(held):
                least = min(least, *(slot[1] for slot in held.values() if slot[1] > watermark))
            if not ended:
                continue
            out: list[Any] = []
            for index, trigger in fire:
                out += self._fire_each(trigger, index, ended)
            for _, _, _, slot in ended:
                if held.get(slot[0]) is slot:
                    self._forget(name, key, held, slot)
            yield out
        self.first_end = least

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
        """``[[key, [[start, end, state, counts], ...]], ...]``, in the order triggers fire
        (empty when the slot's keyed state keeps the window)."""
        return self.held.saved()

    def restore(self, snapshot: list[Any], keep: Callable[[Any], bool]) -> None:
        """Merge in a snapshot's keys that ``keep`` accepts: where an extent is held already
        (or, for sessions, overlaps one held) the states are merged."""
        for key, saved in snapshot:
            if not keep(key):
                continue
            name = canonical(key)
            held = self.held.get(name, key)
            if held is None:
                held = {}
            for start, end, state, counts in saved:
                slot = self._place(held, (start, end))
                slot[2:] = self._combine([slot, [start, end, state, counts]])[2:]
            self.held.put(name, key, held)

    # -- state ----------------------------------------------------------------------------------

    def take(self, taken: Taken, keys: list[Any], names: list[str]) -> int:
        """Merge in what this window took of a batch by columns (peer.state.window_columns),
        each key's slots read and written once. How many rows were late."""
        if taken.late:
            self.late.inc(taken.late)
        merge, window, held, current = self.aggregation.merge, self.window, None, -1
        for index, extent, size, partial in zip(
            taken.keys, taken.extents, taken.sizes, taken.partials, strict=True
        ):
            if index != current:
                if held is not None:
                    self.held.put(names[current], keys[current], held)
                current = index
                held = self.held.get(names[index], keys[index])
                if held is None:
                    held = {}
            slot = self._place(held, extent)  # type: ignore[arg-type]
            slot[2] = merge(window, slot[2], partial)
            counts = slot[3]
            for trigger in range(len(counts)):
                counts[trigger] += size
        if held is not None:
            self.held.put(names[current], keys[current], held)
        return taken.late

    def _place(self, held: Slots, extent: Extent) -> Slot:
        """The slot that state for ``extent`` goes to, made if need be: for a session, the
        session it joins, with every session it overlaps merged in."""
        if self.window.type != "session":
            slot = held.get(extent[0])
            if slot is None:
                slot = held[extent[0]] = self._new(extent)
            return slot
        merge = absorb([(s[0], s[1]) for s in held.values()], extent)
        parts = [held.pop(start) for start, _ in merge.merged]
        if not parts:
            slot = self._new(merge.extent)
        else:  # the one session it falls in or extends, as it is, or those it bridges merged
            slot = parts[0] if len(parts) == 1 else self._combine(parts)
            slot[0], slot[1] = merge.extent
        held[slot[0]] = slot
        return slot

    def _new(self, extent: Extent) -> Slot:
        self.first_end = min(self.first_end, extent[1])
        return [extent[0], extent[1], self.aggregation.init(self.window), [0] * len(self.triggers)]

    def _combine(self, slots: list[Slot]) -> Slot:
        merge = functools.partial(self.aggregation.merge, self.window)
        state = functools.reduce(merge, (slot[2] for slot in slots))
        counts = [sum(counts) for counts in zip(*(s[3] for s in slots), strict=True)]
        return [slots[0][0], slots[0][1], state, counts]

    def _forget(self, name: str, key: Any, held: Slots, slot: Slot) -> None:
        del held[slot[0]]
        if held:
            self.held.put(name, key, held)
        else:
            self.held.drop(name, key)

    def _everything(self) -> list[Due]:
        """Every slot held, keys in canonical order, each key's extents earliest first (what a
        timer trigger fires)."""
        return [(name, key, held, held[start]) for name, key, held in self.held.everything()
                for start in sorted(held)]  # fmt: skip

    # -- firing ---------------------------------------------------------------------------------

    def _on_segment(
        self, segment: Any, name: str, key: Any, held: Slots, targets: list[Slot]
    ) -> list[Any]:
        """Segment and punctuation triggers, after ``segment`` went into ``targets``."""
        out: list[Any] = []
        for index, trigger in enumerate(self.triggers):
            on = trigger.spec.on
            if on == "segment":
                threshold: int = trigger.spec.threshold  # type: ignore[assignment]
                due = [s for s in targets if held.get(s[0]) is s and s[3][index] >= threshold]
            elif on == "punctuation" and trigger.predicate(segment):  # type: ignore[misc]
                due = targets
            else:
                continue
            out += self._fire_each(trigger, index, [(name, key, held, slot) for slot in due])
        return out

    def _fire_each(self, trigger: Armed, index: int, due: list[Due]) -> list[Any]:
        """Fire each slot still held; a discarding trigger then forgets it."""
        out: list[Any] = []
        for name, key, held, slot in due:
            if held.get(slot[0]) is not slot:
                continue  # a discarding trigger forgot it
            slot[3][index] = 0
            value = self.aggregation.value(slot[2])
            out += trigger.fire(self.task, key, (slot[0], slot[1]), value)
            if trigger.spec.refinement == "discarding":
                self._forget(name, key, held, slot)
            else:
                self.held.put(name, key, held)
        return out


class TaskState:
    """Every window of ``task``. ``key_of`` gives a segment's group key (None for a task that
    does not group: every segment then has the key None). A keyed task's windows keep their
    slots in ``keyed``, the slot's keyed state, when given; otherwise in dicts of their own,
    whole in every snapshot."""

    def __init__(
        self, job: Job, task: str, key_of: Callable[[Any], Any] | None,
        keyed: KeyedState | None = None,
    ) -> None:  # fmt: skip
        self.key_of = key_of
        self.windows = [
            WindowState(window, [t for t in job.triggers if t.window == window.id], task,
                        HeapExtents() if keyed is None else KeyedExtents(keyed, window),
                        job.id or "")
            for window in job.windows
            if window.task == task
        ]  # fmt: skip
        self.mark = -math.inf
        """The highest watermark seen: event times below it are late."""
        self._clock: Callable[[float, float], None] = _unclocked
        """Stamps the keyed state's clocks where a window's keys expire (in processing time,
        so a watermark stamps nothing): what a write now lives from, and what an expiry is read
        against."""
        if keyed is not None and any(w.window.ttl is not None for w in self.windows):
            self._clock = keyed.tick
        self.late = 0
        """Segments dropped as late, once per window they missed."""
        self.reads = _fields_read(key_of, self.windows)
        """The fields the windows read of a segment; None for all of them."""
        as_they_come = any(w.per_segment or w.window.late is not None for w in self.windows)
        self._take_rows = self._in_order if as_they_come else self._by_key
        """How rows are taken: in order where windows emit as they come, else key by key."""
        self.by_columns = (
            not as_they_come
            and (key_of is None or isinstance(key_of, FieldKey))
            and all(qualifies(w.window) for w in self.windows)
        )
        """Whether an Arrow batch may be taken by its columns (peer.state.window_columns)."""
        self._take_arrow = self._by_columns if self.by_columns else self._as_rows

    def apply(self, segments: Batch, now: float) -> list[Any]:
        """Take ``segments`` into every window; segment and punctuation triggers fire as they
        go, then timer triggers that are due (as ``tick``)."""
        if not isinstance(segments, list):
            return self._take_arrow(segments, now)
        return self._take_rows(segments, now)

    def _by_columns(self, batch: pa.RecordBatch, now: float) -> list[Any]:
        """An Arrow batch, by its columns where they allow it, else as rows."""
        if self._take_columns(batch, now):
            return self.tick(now)
        return self._as_rows(batch, now)

    def _as_rows(self, batch: pa.RecordBatch, now: float) -> list[Any]:
        """An Arrow batch as rows of the columns the windows read."""
        read = batch if self.reads is None else select(batch, self.reads)
        return self._take_rows(rows(read), now)

    def _by_key(self, segments: list[Any], now: float) -> list[Any]:
        """Rows, where no window emits as segments come (no segment or punctuation trigger, no
        side output for late rows): each key's rows taken together, in the order they came, its
        slots read and written once per window. Keys are apart, so the state is the one taking
        the rows in order leaves, and so is what a later watermark or timer fires."""
        by_key: dict[str, tuple[Any, list[Any]]] = {}
        names, key_of = KeyNames(), self.key_of
        for segment in segments:
            key = None if key_of is None else key_of(segment)
            name = names.of(key)
            taken = by_key.get(name)
            if taken is None:
                by_key[name] = (key, [segment])
            else:
                taken[1].append(segment)
        self._clock(now, self.mark)
        for window in self.windows:
            for name, (key, its) in by_key.items():  # in the order the keys first came
                self.late += window.add_each(its, key, name, self.mark)
        return self.tick(now)

    def _in_order(self, segments: list[Any], now: float) -> list[Any]:
        """Rows, one by one, each through every window: segment and punctuation triggers fire,
        and late rows go aside, in the order the rows came."""
        out: list[Any] = []
        names = KeyNames()
        self._clock(now, self.mark)
        for segment in segments:
            key = None if self.key_of is None else self.key_of(segment)
            name = names.of(key)
            for window in self.windows:
                t = window.time(segment)
                if t is not None and t < self.mark:
                    self.late += 1
                    window.late.inc()
                    if window.window.late is not None:
                        out.append(Late(window.window.late, segment))
                    continue
                out += window.add(segment, t, key, name)
        return out + self.tick(now)

    def _take_columns(self, batch: pa.RecordBatch, now: float) -> bool:
        """Take ``batch`` into every window by its columns; False, having changed nothing, when
        one of its columns does not allow it."""
        if self.key_of is None:
            keys: list[Any] = [None]
            index = np.zeros(batch.num_rows, dtype=np.int64)
        else:
            keys, found = self.key_of.distinct(batch)  # type: ignore[attr-defined]
            index = found.to_numpy(zero_copy_only=False)
        taken = [shares(window.window, batch, index, self.mark) for window in self.windows]
        if any(took is None for took in taken):
            return False
        self._clock(now, self.mark)
        names = KeyNames()
        key_names = [names.of(key) for key in keys]
        for window, took in zip(self.windows, taken, strict=True):
            assert took is not None
            self.late += window.take(took, keys, key_names)
        return True

    def watermark(self, watermark: float) -> Iterator[list[Any]]:
        """Fire and forget every extent that ends at or before ``watermark``, window by window,
        as it is read (``WindowState.close``): no segment is taken until it is read through."""
        if watermark <= self.mark:
            return iter(())
        self.mark = watermark
        return (out for window in self.windows for out in window.close(watermark))

    def tick(self, now: float) -> list[Any]:
        self._clock(now, self.mark)
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

    def finish(self) -> Iterator[list[Any]]:
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


def _unclocked(now: float, watermark: float) -> None:
    """No window of the task expires its keys: no clock to stamp."""


class KeyNames:
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
        if window.window.late is not None:
            return None  # a late segment goes to its side output whole
        key = window.window.key  # None only in a global window, once validated
        if window.window.type != "global" and key is not None:
            reads.append(key)
        needed = fields_read(window.window)
        if needed is None or any(t.spec.on == "punctuation" for t in window.triggers):
            return None
        reads += needed
    return list(dict.fromkeys(reads))
