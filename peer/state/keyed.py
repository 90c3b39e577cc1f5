"""Keyed state: values a function keeps per group key, which the engine stores, snapshots and
restores per key group (peer.state.key_groups), so that a slot's state moves with its keys.

A keyed task's fn class (the task has ``group_by_key`` or ``group_by_fn``) asks for its state
once, in ``open(state)``, and reads and writes it for the key of the segment it is given:

    class RunningCount:
        def open(self, state: KeyedState) -> None:
            self.count = state.value_state("count", default=0)

        def __call__(self, segment):
            n = self.count.get() + 1
            self.count.set(n)
            return {**segment, "count": n}

Before each segment the engine makes that segment's group key the current one, so each handle
reads and writes the current key's entry: ``value_state`` holds one value, ``map_state`` a
mapping of its own, ``list_state`` a list. Values are plain data (msgpack: numbers, strings,
bytes, lists, maps, None); change them through the handle (``set``, ``put``, ``add``), never in
place, since what a handle gives may be what the state holds.

A state with a ``Ttl`` forgets what was not written for that long: a value, a map's entry, a
list (as a whole) reads as absent once ``seconds`` have passed since its last write, and the
next snapshot leaves it out. Processing time is the task's clock at the start of each batch
(``peer.context``, so a task recovered locally expires the same entries again); event time is
the task's watermark (an entry written before the first one lives until written again).

The entries of a key group live together, so a snapshot is one part per key group, and a
restore takes whole key groups. A snapshot is whole (every live entry) or holds what changed
since the one before it (each entry written since, as it is now, or its key's canonical text
alone for one that is gone), so that a checkpoint costs what changed; a restore takes a whole
snapshot's parts and then each later one's, in order. Nothing here reads a clock or iterates a
set: the same calls give the same state and the same snapshots on every peer.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import msgpack

from peer.job.values import canonical
from peer.state.backends import Backend, CopyingBackend, Entry, Frozen, MemoryBackend
from peer.state.forked import forked, worth_forking
from peer.state.key_groups import held_under, key_group_of

TTL_TIMES = ("processing", "event")

NEVER = math.inf

HEADERS = msgpack.Packer()
"""Packs the map and array headers of a part put together from entries encoded already."""

ENGINE = "@"
"""What the names of the states the engine keeps for its own parts start with."""


Changes = dict[int, dict[str, dict[str, Any]]]
"""Key group -> state -> canonical key -> what is known of its entry's last write: the entry
(memory), the entry as stored (disk), or None (gone, or on disk, to be read back)."""

Written = dict[str, list[Any]]
"""State -> the key group and canonical key of each write to it, in turn, flat (group, text,
group, text, ...), repeats and all."""

NOTED_WRITES = 2**20
"""How many items (two a write) an epoch in memory notes before it drops the repeats: noting a
write is two appends (a dict insert on keys spread over the state misses the cache and cost
several times as much), and this bounds what the repeats hold meanwhile (about 36 MiB)."""

NOTED_BYTES = 64 * 2**20
"""What an epoch on disk notes of the entries written, as stored, before it notes their keys
alone: a snapshot of changes reads back only the entries noted by key, and the memory it holds
meanwhile stays bounded however long the epoch."""


class StateError(ValueError):
    """A state asked for or used wrongly; the message names the state."""


UNSTORABLE = (TypeError, ValueError, OverflowError)
"""What msgpack raises for a value it cannot encode."""


def unstorable(group: int, name: str, key: Any, error: Exception) -> StateError:
    return StateError(
        f"key group {group}, state {name!r}, key {key!r}: its value cannot be stored (values "
        f"are numbers, strings, bytes, lists, maps and None): {error}"
    )


@dataclass(frozen=True, slots=True)
class Ttl:
    """How long an entry lives after its last write, in seconds of processing or event time."""

    seconds: float
    time: str = "processing"

    def __post_init__(self) -> None:
        if not (isinstance(self.seconds, int | float) and 0 < self.seconds < NEVER):
            raise StateError(f"ttl seconds must be a number > 0, got {self.seconds!r}")
        if self.time not in TTL_TIMES:
            raise StateError(f"ttl time must be one of {', '.join(TTL_TIMES)}, got {self.time!r}")


@dataclass(frozen=True, slots=True)
class Declared:
    """A state as ``open`` asked for it."""

    name: str
    kind: str
    default: Any
    ttl: Ttl | None


class Parts:
    """A snapshot of keyed state as a barrier stores it: one part per key group, ascending,
    given by ``read`` (again for each try of an upload that failed), then let go by
    ``release``. ``size`` is their bytes, once known: at once for parts packed already,
    after the first whole read for parts packed as they are read."""

    def __init__(
        self, read: Callable[[], Iterator[tuple[int, bytes]]], size: int | None,
        release: Callable[[], None],
    ) -> None:  # fmt: skip
        self._read, self.size, self.release = read, size, release

    @classmethod
    def held(cls, parts: Mapping[int, bytes]) -> Parts:
        ordered = sorted(parts.items())
        return cls(lambda: iter(ordered), sum(len(part) for _, part in ordered), _kept)

    def read(self) -> Iterator[tuple[int, bytes]]:
        size = 0
        for group, part in self._read():
            size += len(part)
            yield group, part
        self.size = size


def _kept() -> None:
    """Parts packed already hold nothing to let go of but themselves."""


class KeyedState:
    """Every keyed state of one slot of a task, per key group, held in ``backend``
    (peer.state.backends; memory by default): handed to the fn's ``open``.

    An entry is ``[key, value, expires]``: the group key as given, its value, and when it
    expires (inf: never); a map's value is itself ``{map key: [value, expires]}``. In a
    snapshot of changes, ``[text]`` says that the entry of the key whose canonical text that is
    has gone."""

    def __init__(
        self, key_groups: int, backend: Backend | None = None, snapshotted: bool = True
    ) -> None:
        self.key_groups = key_groups
        self.backend = backend or MemoryBackend()
        self.declared: dict[str, Declared] = {}
        self.text = ""
        """The current key's canonical JSON."""
        self.key: Any = None
        self.group_id = 0
        """The current key's key group."""
        self.clocks = {"processing": 0.0, "event": -NEVER}
        self.written: Written = {}
        """In memory, the writes since the last snapshot, each as its key group and key: what
        the next snapshot of changes holds, the entries they name as they are then. Noting is
        all a write pays; the repeats go, and the entries are found, when the snapshot is
        packed (by a forked child, for many: peer.state.forked)."""
        self.noted_writes = NOTED_WRITES
        """The items ``written`` may hold before its repeats are dropped (``bound``)."""
        self.changes: Changes = {}
        """On disk, key group -> state -> canonical key -> the entry as stored by its last
        write since the last snapshot, up to NOTED_BYTES an epoch, then its key alone (None,
        as for one gone), in the order first written: what the next snapshot of changes holds,
        the entries noted by key read back, so that what changed is held on disk, not twice in
        memory, however long an epoch lasts."""
        self.noted_bytes = 0
        """The bytes of stored entries noted in this epoch."""
        self.snapshotted = snapshotted
        self.copying: CopyingBackend | None = None
        """The backend, where it holds copies of what was written: snapshots then read their
        entries back from it, off the task's thread."""
        self._note: Callable[[Declared, Entry | None, bytes | None], None] = _unnoted
        self._hold_in(self.backend)

    def _hold_in(self, backend: Backend) -> None:
        """Keep entries in ``backend`` from now on, noting changes as it needs."""
        self.backend = backend
        self.copying = backend if isinstance(backend, CopyingBackend) else None
        if not self.snapshotted:
            self._note = _unnoted
        elif self.copying is not None:
            self._note = self._note_stored
        else:
            self._note = self._note_write

    # -- what open asks for ----------------------------------------------------------------------

    def value_state(self, name: str, default: Any = None, ttl: Ttl | None = None) -> ValueState:
        """One value per key; ``default`` where none is held."""
        return ValueState(self, self._declare(name, "value", default, ttl))

    def map_state(self, name: str, ttl: Ttl | None = None) -> MapState:
        """A mapping per key, each entry expiring on its own."""
        return MapState(self, self._declare(name, "map", None, ttl))

    def list_state(self, name: str, ttl: Ttl | None = None) -> ListState:
        """A list per key, expiring as a whole."""
        return ListState(self, self._declare(name, "list", None, ttl))

    def engine_state(self, name: str, ttl: Ttl | None = None) -> Declared:
        """A state the engine keeps for its own parts (a window's extents per key): ``@`` and
        ``name``, which no fn's state is called. Its value is whatever plain data the part
        keeps, and it reads and writes it through ``entry``, ``rewrite`` and ``clear``."""
        return self._declare_named(ENGINE + name, "engine", None, ttl)

    def _declare(self, name: str, kind: str, default: Any, ttl: Ttl | None) -> Declared:
        if not (isinstance(name, str) and name and "\0" not in name):
            raise StateError(f"a state's name must be a non-empty string without NUL, got {name!r}")
        if name.startswith(ENGINE):
            raise StateError(f"state {name!r}: names starting with {ENGINE!r} are the engine's")
        return self._declare_named(name, kind, default, ttl)

    def _declare_named(self, name: str, kind: str, default: Any, ttl: Ttl | None) -> Declared:
        if ttl is not None and not isinstance(ttl, Ttl):
            raise StateError(f"state {name!r}: ttl must be a Ttl, got {ttl!r}")
        if name in self.declared:
            raise StateError(f"state {name!r} is asked for twice")
        declared = self.declared[name] = Declared(name, kind, default, ttl)
        self.written[name] = []
        return declared

    # -- what the engine does ----------------------------------------------------------------------

    def expires_in(self, time: str) -> bool:
        """Whether any state asked for expires in ``time`` (processing or event)."""
        return any(d.ttl is not None and d.ttl.time == time for d in self.declared.values())

    def at(self, key: Any) -> None:
        """Make ``key`` the current key."""
        self.text, self.group_id = held_under(key, self.key_groups)
        self.key = key

    def at_held(self, key: Any, text: str) -> None:
        """Make ``key``, whose canonical text is ``text``, the current key."""
        if text != self.text:
            self.text, self.group_id, self.key = text, key_group_of(text, self.key_groups), key

    def each(self, declared: Declared) -> Iterator[tuple[str, Entry]]:
        """Every entry of ``declared``, with its key's canonical text, in that text's order,
        merged from the key groups' as it is read: a long read (a watermark that closes every
        key's windows) holds little at a time on disk, and may be taken a few keys at a time."""
        backend, name = self.backend, declared.name
        return heapq.merge(*[backend.state(group, name) for group in backend.groups()],
                           key=itemgetter(0))  # fmt: skip

    def tick(self, now: float, watermark: float) -> None:
        """The processing and event time what is written now is stamped with."""
        self.clocks["processing"], self.clocks["event"] = now, watermark

    def changed(self) -> bool:
        """Whether anything was written since the last snapshot."""
        return bool(self.changes) or any(self.written.values())

    def bound(self) -> None:
        """Drop the repeats of the writes noted in memory once they hold more than they may
        (the runner asks after each batch): what an epoch notes then grows with the keys it
        writes, not with its writes."""
        if sum(map(len, self.written.values())) <= self.noted_writes:
            return
        for written in self.written.values():
            written[:] = [item for write in _firsts(written) for item in write]
        self.noted_writes = max(NOTED_WRITES, 2 * sum(map(len, self.written.values())))

    def _taken(self) -> tuple[Written, Changes]:
        """What was noted since the last snapshot; the next one notes afresh."""
        written, changes = self.written, self.changes
        self.written = {name: [] for name in written}
        self.changes, self.noted_bytes, self.noted_writes = {}, 0, NOTED_WRITES
        return written, changes

    def snapshot(self, whole: bool) -> dict[int, bytes]:
        """Each key group's part, msgpack: its states in name order; ``whole``: each state's
        live entries in canonical key order (key groups that hold none are left out); else
        the entries written since the last snapshot, each as it is now (``[text]`` once gone),
        in the order first written. Either way what was written until now is what the next
        snapshot of changes starts from."""
        written, changes = self._taken()
        clocks = dict(self.clocks)
        if whole:
            return dict(self._wholes(self.backend, clocks))
        if self.copying is None:
            return dict(self._changes(self._gathered(written), clocks))
        return dict(self._stored_changes(changes, clocks, self.copying.pinned()))

    def parts(self, whole: bool) -> Parts:
        """The snapshot a barrier stores: ``snapshot``'s parts, packed at once, or by a child
        forked now where that is quicker (peer.state.forked: entries in memory); or, on a
        backend that holds copies, packed as they are read (off the task's thread, one key
        group at a time, while the task writes on): a whole one from a frozen copy of the
        backend, one of changes from entries read as they were at the barrier."""
        copying, backend = self.copying, self.backend
        if copying is None:
            if not worth_forking(self._entries(whole)):
                return Parts.held(self.snapshot(whole))
            written, _ = self._taken()
            clocks = dict(self.clocks)
            packing = forked(lambda: self._wholes(backend, clocks) if whole
                             else self._changes(self._gathered(written), clocks))  # fmt: skip
            return Parts(packing.read, None, packing.release)
        _, changes = self._taken()
        clocks = dict(self.clocks)
        if not whole:
            read = copying.pinned()
            return Parts(lambda: self._stored_changes(changes, clocks, read), None, _kept)
        frozen = copying.frozen()
        return Parts(lambda: self._stored_wholes(frozen, clocks), None, frozen.close)

    def _entries(self, whole: bool) -> int:
        """About how many entries a snapshot in memory would pack: whole, all those held; else
        one a write noted (repeats and all)."""
        if whole:
            held = self.backend
            return held.entries() if isinstance(held, MemoryBackend) else 0
        return sum(map(len, self.written.values())) // 2

    def _gathered(self, written: Written) -> Changes:
        """The entries ``written`` names, as they are now (None: gone), by key group, state and
        key, each key once, in the order first written."""
        changes: Changes = {}
        get = self.backend.get
        for name, writes in written.items():
            for group, text in _firsts(writes):
                changes.setdefault(group, {}).setdefault(name, {})[text] = get(group, name, text)
        return changes

    def _changes(self, changes: Changes, clocks: dict[str, float]) -> Iterator[tuple[int, bytes]]:
        """The part of each key group in ``changes`` that still holds some, in order, entries
        expiring against ``clocks``."""
        for group in sorted(changes):
            states = self._changed(changes[group], clocks)
            if states:
                yield group, self._pack(group, states)

    def _stored_changes(
        self, changes: Changes, clocks: dict[str, float],
        read: Callable[[int, str, str], bytes | None],
    ) -> Iterator[tuple[int, bytes]]:  # fmt: skip
        """``_changes`` of entries noted as stored, or by key alone and read through ``read``,
        each put into its part as it is (the same bytes); only a state with a TTL is decoded,
        to leave its expired entries out."""
        for group in sorted(changes):
            states: list[tuple[str, list[bytes]]] = []
            for name in sorted(changes[group]):
                declared = self.declared.get(name)
                if declared is None:
                    continue
                stored = [(text, read(group, name, text) if noted is None else noted)
                          for text, noted in changes[group][name].items()]  # fmt: skip
                live = None if declared.ttl is None else self._expiring(declared, clocks)
                states.append((name, [self._stored_change(t, v, live) for t, v in stored]))
            if states:
                yield group, _joined(states)

    @staticmethod
    def _stored_change(
        text: str, value: bytes | None, live: Callable[[Entry], Entry | None] | None
    ) -> bytes:
        """An entry of a snapshot of changes from what is stored of it: as stored, or, once
        gone (or, through ``live``, expired), its key's canonical text alone."""
        if value is not None and live is not None:
            entry = live(msgpack.unpackb(value, strict_map_key=False))
            value = None if entry is None else msgpack.packb(entry)
        return msgpack.packb([text]) if value is None else value

    def _wholes(self, source: Backend, clocks: dict[str, float]) -> Iterator[tuple[int, bytes]]:
        """The part of each key group ``source`` holds live entries of, in order, entries
        expiring against ``clocks``."""
        for group in source.groups():
            states = self._whole(source, group, clocks)
            if states:
                yield group, self._pack(group, states)

    def _stored_wholes(
        self, frozen: Frozen, clocks: dict[str, float]
    ) -> Iterator[tuple[int, bytes]]:
        """``_wholes`` of a frozen copy, each part put together from the entries as stored
        (the same bytes): only a state with a TTL is decoded, to leave its expired entries
        out."""
        for group in frozen.groups():
            states: list[tuple[str, list[bytes]]] = []
            for name, stored in frozen.encoded(group):
                declared = self.declared.get(name)
                if declared is None:
                    continue
                values = stored
                if declared.ttl is not None:
                    held = [msgpack.unpackb(v, strict_map_key=False) for v in stored]
                    values = [msgpack.packb(e) for e in self._live(declared, held, clocks)]
                if values:
                    states.append((name, values))
            if states:
                yield group, _joined(states)

    def _whole(
        self, source: Backend, group: int, clocks: dict[str, float]
    ) -> dict[str, list[Entry]]:
        """A key group's live entries of the states asked for, by state and key."""
        states: dict[str, list[Entry]] = {}
        for name, held in source.states(group):
            declared = self.declared.get(name)
            if declared is None:
                continue
            live = held if declared.ttl is None else self._live(declared, held, clocks)
            if live:
                states[name] = live
        return states

    def _changed(
        self, changed: dict[str, dict[str, Entry | None]], clocks: dict[str, float]
    ) -> dict[str, list[Entry]]:
        """The entries ``changed`` names, as they are now: live, or gone (``[text]``)."""
        states: dict[str, list[Entry]] = {}
        for name in sorted(changed):
            declared, texts = self.declared.get(name), changed[name]
            if declared is None:
                continue
            if declared.ttl is not None:
                live = self._expiring(declared, clocks)
                texts = {text: None if e is None else live(e) for text, e in texts.items()}
            states[name] = [[text] if e is None else e for text, e in texts.items()]
        return states

    def _pack(self, group: int, states: dict[str, list[Entry]]) -> bytes:
        """A key group's part; a value msgpack cannot hold is a StateError naming the key
        group, the state and the key."""
        try:
            return msgpack.packb(states)
        except UNSTORABLE:
            pass
        for name, entries in states.items():
            for entry in entries:
                try:
                    msgpack.packb(entry)
                except UNSTORABLE as e:
                    raise unstorable(group, name, entry[0], e) from None
        raise StateError(f"key group {group}: its state cannot be stored")

    def restore(self, layers: Iterable[Mapping[int, bytes]], owned: Callable[[int], bool]) -> None:
        """Take the key groups ``owned`` accepts from each snapshot's parts in turn: a whole
        snapshot's, then each one of changes after it, so that later writes win and gone
        entries go; a state no longer asked for is dropped."""
        for layer in layers:
            for group, part in layer.items():
                if owned(group):
                    self._take(group, part)

    def _take(self, group: int, part: bytes) -> None:
        backend = self.backend
        for name, entries in msgpack.unpackb(part, strict_map_key=False).items():
            if name not in self.declared:
                continue
            for entry in entries:
                if len(entry) == 1:
                    backend.delete(group, name, entry[0])
                else:
                    backend.put(group, name, canonical(entry[0]), entry)

    def adopt(self, backend: Backend, owned: range) -> None:
        """Hold what ``backend`` holds of the key groups ``owned`` (the rest dropped) instead
        of this state's own backend, which holds nothing yet and is closed: a slot that keeps
        the key groups it held before a change of slots. The backend is of the job's kind, as
        this state's own was."""
        own = self.backend
        self._hold_in(backend)
        own.close()
        backend.keep_only(owned)

    def close(self) -> None:
        """Let go of the backend (the disk backend's directory goes)."""
        self.backend.close()

    def _live(
        self, declared: Declared, entries: list[Entry], clocks: dict[str, float]
    ) -> list[Entry]:
        """Of ``entries`` of ``declared`` (which has a TTL), what a snapshot holds."""
        live = self._expiring(declared, clocks)
        return [e for e in map(live, entries) if e is not None]

    def _expiring(
        self, declared: Declared, clocks: dict[str, float]
    ) -> Callable[[Entry], Entry | None]:
        """What a snapshot holds of an entry of ``declared`` (which has a TTL) at ``clocks``:
        the entry, None once it has expired, a map's expired entries left out."""
        assert declared.ttl is not None
        now = clocks[declared.ttl.time]
        if declared.kind != "map":
            return lambda entry: entry if entry[2] > now else None

        def live(entry: Entry) -> Entry | None:
            key, value, expires = entry
            value = {k: v for k, v in value.items() if v[1] > now}
            return [key, value, expires] if value else None

        return live

    # -- what the handles use ----------------------------------------------------------------------

    def expiry(self, declared: Declared) -> float:
        """When an entry of ``declared`` written now expires. Before its clock has any time (an
        event-time ttl before the first watermark) there is no time to count from: such an
        entry lives until it is written again."""
        ttl = declared.ttl
        if ttl is None:
            return NEVER
        clock = self.clocks[ttl.time]
        return NEVER if clock == -NEVER else clock + ttl.seconds

    def now(self, declared: Declared) -> float:
        ttl = declared.ttl
        return -NEVER if ttl is None else self.clocks[ttl.time]

    def entry(self, declared: Declared) -> Entry | None:
        """The current key's live entry of ``declared``."""
        entry = self.backend.get(self.group_id, declared.name, self.text)
        if entry is None or (declared.kind != "map" and entry[2] <= self.now(declared)):
            return None
        return entry

    def write(self, declared: Declared, value: Any) -> None:
        self.rewrite(declared, [self.key, value, self.expiry(declared)])

    def rewrite(self, declared: Declared, entry: Entry) -> None:
        """Hold ``entry`` (new, or changed in place) as the current key's of ``declared``; a
        value the disk backend cannot encode is a StateError at once, naming it."""
        try:
            stored = self.backend.put(self.group_id, declared.name, self.text, entry)
        except UNSTORABLE as e:
            raise unstorable(self.group_id, declared.name, self.key, e) from None
        self._note(declared, entry, stored)

    def clear(self, declared: Declared) -> None:
        if self.backend.delete(self.group_id, declared.name, self.text):
            self._note(declared, None, None)

    def _note_write(self, declared: Declared, entry: Entry | None, stored: bytes | None) -> None:
        """In memory: the current key's entry of ``declared`` was written (or cleared)."""
        written = self.written[declared.name]
        written.append(self.group_id)
        written.append(self.text)

    def _note_stored(self, declared: Declared, entry: Entry | None, stored: bytes | None) -> None:
        """On disk: the current key's entry of ``declared`` is now as ``stored``, noted as such,
        or by its key alone once the epoch has noted NOTED_BYTES (or it is gone)."""
        if stored is not None:
            self.noted_bytes += len(stored)
            if self.noted_bytes > NOTED_BYTES:
                stored = None
        try:  # the key group and state have been noted in this epoch, but for its first writes
            self.changes[self.group_id][declared.name][self.text] = stored
        except KeyError:
            self._noted(declared)[self.text] = stored

    def _noted(self, declared: Declared) -> dict[str, Any]:
        """The current key group's changes of ``declared``."""
        states = self.changes.get(self.group_id)
        if states is None:
            states = self.changes[self.group_id] = {}
        texts = states.get(declared.name)
        if texts is None:
            texts = states[declared.name] = {}
        return texts


def _firsts(written: list[Any]) -> Iterable[tuple[int, str]]:
    """Each (key group, key) of a flat ``Written`` list once, in the order first written."""
    return dict.fromkeys(zip(written[::2], written[1::2], strict=True))


def _joined(states: list[tuple[str, list[bytes]]]) -> bytes:
    """A key group's part from each state's entries as stored, in name order: the bytes msgpack
    gives the map of them, without decoding them."""
    pieces: list[bytes] = []
    for name, values in states:
        pieces += [msgpack.packb(name), HEADERS.pack_array_header(len(values)), *values]
    return b"".join([HEADERS.pack_map_header(len(states)), *pieces])


def _unnoted(declared: Declared, entry: Entry | None, stored: bytes | None) -> None:
    """A slot that takes no snapshot notes no change."""


class ValueState:
    """One value per key."""

    def __init__(self, state: KeyedState, declared: Declared) -> None:
        self._state, self._declared = state, declared

    def get(self) -> Any:
        entry = self._state.entry(self._declared)
        return self._declared.default if entry is None else entry[1]

    def set(self, value: Any) -> None:
        self._state.write(self._declared, value)

    def clear(self) -> None:
        self._state.clear(self._declared)


class ListState:
    """A list per key; ``get`` gives a copy."""

    def __init__(self, state: KeyedState, declared: Declared) -> None:
        self._state, self._declared = state, declared

    def get(self) -> list[Any]:
        entry = self._state.entry(self._declared)
        return [] if entry is None else list(entry[1])

    def add(self, value: Any) -> None:
        entry = self._state.entry(self._declared)
        if entry is None:
            self._state.write(self._declared, [value])
        else:
            entry[1].append(value)
            entry[2] = self._state.expiry(self._declared)
            self._state.rewrite(self._declared, entry)

    def update(self, values: list[Any]) -> None:
        self._state.write(self._declared, list(values))

    def clear(self) -> None:
        self._state.clear(self._declared)


class MapState:
    """A mapping per key, whose entries expire one by one."""

    def __init__(self, state: KeyedState, declared: Declared) -> None:
        self._state, self._declared = state, declared

    def _held(self) -> dict[Any, list[Any]] | None:
        entry = self._state.entry(self._declared)
        return None if entry is None else entry[1]

    def _found(self, key: Any) -> list[Any] | None:
        held = self._held()
        found = None if held is None else held.get(key)
        return None if found is None or found[1] <= self._state.now(self._declared) else found

    def get(self, key: Any, default: Any = None) -> Any:
        found = self._found(key)
        return default if found is None else found[0]

    def __contains__(self, key: Any) -> bool:
        return self._found(key) is not None

    def put(self, key: Any, value: Any) -> None:
        state, declared = self._state, self._declared
        entry = state.entry(declared)
        if entry is None:
            state.write(declared, {key: [value, state.expiry(declared)]})
            return
        entry[1][key] = [value, state.expiry(declared)]
        state.rewrite(declared, entry)

    def remove(self, key: Any) -> None:
        entry = self._state.entry(self._declared)
        if entry is not None and entry[1].pop(key, None) is not None:
            self._state.rewrite(self._declared, entry)

    def items(self) -> Iterator[tuple[Any, Any]]:
        """The live entries, in the order they were first put."""
        held, now = self._held() or {}, self._state.now(self._declared)
        return iter([(k, v[0]) for k, v in held.items() if v[1] > now])

    def clear(self) -> None:
        self._state.clear(self._declared)
