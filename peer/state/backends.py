"""Where keyed state's entries are held (peer.state.keyed): in the process's memory, the default,
or on the machine's disk for state larger than memory, in an embedded RocksDB (rocksdict).
A job chooses with ``state_backend``.

Both hold one entry per (key group, state name, canonical key) and give a key group's entries
in (state name, key) order: the order of their bytes in RocksDB (the key group, two bytes
big-endian, then the name, a NUL, then the key's canonical JSON, which never holds a NUL), and
the order the memory backend sorts by. Snapshots are therefore the same bytes whichever backend
took them, and a job may resume from a checkpoint on the other one.

What the disk backend holds is written to a directory of its own (under the member's
``--state-dir``, in a directory named for the process's id) without a write-ahead log: the
checkpoint is what makes state durable, and a slot restored after a failure starts from a new
directory. ``close`` deletes it; what a killed process left is deleted by the next process
that holds state there (``sweep``).

A whole snapshot of the disk backend reads a frozen copy (``frozen``): a RocksDB checkpoint, its
memtable flushed and its files hard-linked into a directory beside the live one, opened read
only. Taking it costs the flush; reading it, off the task's thread while the task writes on, sees
the state as it was at the barrier. Until it is closed its files stay on disk, even those the
live database has compacted away since.
"""

from __future__ import annotations

import logging
import shutil
import struct
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import msgpack

from peer.metrics import STATE_DISK_FAILURES
from peer.processes import running
from peer.storage import NotRetried

Entry = list[Any]

WRITE_BUFFER = 16 * 1024 * 1024
"""RocksDB's memtable, a quarter of its default: a state larger than memory should not keep
up to two 64 MiB memtables resident (bench/state.py measured 5.3 times the state to the
process's peak resident memory with it, 4.6 with the default)."""

LAST_KEY = struct.pack(">H", 0xFFFF)
"""Past every entry's key: key groups number fewer than 65,535."""

NOT_FOUND = "key not found"
"""What rocksdict's snapshot raises (a plain Exception) for a key it does not hold."""

log = logging.getLogger(__name__)


class StateStoreError(NotRetried, RuntimeError):
    """The disk backend's store failed (a full disk, above all): the job cannot keep its state
    and is killed with this message (an upload reading a snapshot from it does not try again);
    the process and its other jobs go on."""


class Backend(ABC):
    """The entries of one slot's keyed state."""

    @abstractmethod
    def get(self, group: int, name: str, text: str) -> Entry | None:
        """The entry held, or None."""

    @abstractmethod
    def put(self, group: int, name: str, text: str, entry: Entry) -> bytes | None:
        """Hold ``entry`` (again, once changed in place); the entry as stored, for a backend
        that stores copies (None in memory)."""

    @abstractmethod
    def delete(self, group: int, name: str, text: str) -> bool:
        """Drop the entry; whether one was held."""

    @abstractmethod
    def groups(self) -> list[int]:
        """The key groups that may hold entries, in order."""

    @abstractmethod
    def states(self, group: int) -> Iterator[tuple[str, list[Entry]]]:
        """A key group's states in name order, each with its entries in canonical key order."""

    @abstractmethod
    def state(self, group: int, name: str) -> Iterator[tuple[str, Entry]]:
        """A key group's entries of state ``name``, with their canonical keys, in key order, as
        they were when the first is read: writes while they are read do not change them."""

    @abstractmethod
    def keep_only(self, groups: range) -> None:
        """Drop every entry of a key group outside ``groups``: what a slot that keeps its
        backend across a change of slots no longer owns."""

    @abstractmethod
    def close(self) -> None:
        """Let go of what the backend holds."""


class Frozen(ABC):
    """A copy of a backend's entries as they were when it was frozen."""

    @abstractmethod
    def groups(self) -> list[int]:
        """The key groups that may hold entries, in order."""

    @abstractmethod
    def encoded(self, group: int) -> Iterator[tuple[str, list[bytes]]]:
        """A key group's states in name order, each with its entries as stored (msgpack), in
        canonical key order: a snapshot is packed from them without decoding them."""

    @abstractmethod
    def close(self) -> None:
        """Let go of the copy (its directory goes)."""


class CopyingBackend(Backend):
    """A backend whose entries are copies of what was written (encoded, on disk), not the
    objects themselves: a snapshot of changes reads back the entries whose keys it noted, and a
    whole one packs a frozen copy, both off the task's thread while it writes on. In memory,
    where entries change in place, a snapshot is packed at the barrier instead."""

    @abstractmethod
    def pinned(self) -> Callable[[int, str, str], bytes | None]:
        """Reads of entries as stored (msgpack; None for one not held) as they are held now,
        whatever is written after."""

    @abstractmethod
    def frozen(self) -> Frozen:
        """A copy of what is held now, which later writes do not change, to be read while they
        go on and then closed."""


class MemoryBackend(Backend):
    """Dicts: key group -> state name -> canonical key -> entry."""

    def __init__(self) -> None:
        self.held_groups: dict[int, dict[str, dict[str, Entry]]] = {}

    def get(self, group: int, name: str, text: str) -> Entry | None:
        states = self.held_groups.get(group)
        entries = None if states is None else states.get(name)
        return None if entries is None else entries.get(text)

    def put(self, group: int, name: str, text: str, entry: Entry) -> None:
        states = self.held_groups.get(group)
        if states is None:
            states = self.held_groups[group] = {}
        entries = states.get(name)
        if entries is None:
            entries = states[name] = {}
        entries[text] = entry

    def delete(self, group: int, name: str, text: str) -> bool:
        entries = self.held_groups.get(group, {}).get(name)
        return entries is not None and entries.pop(text, None) is not None

    def groups(self) -> list[int]:
        return sorted(self.held_groups)

    def entries(self) -> int:
        """How many entries are held."""
        return sum(
            len(entries) for states in self.held_groups.values() for entries in states.values()
        )

    def states(self, group: int) -> Iterator[tuple[str, list[Entry]]]:
        states = self.held_groups.get(group, {})
        for name in sorted(states):
            entries = states[name]
            yield name, [entries[text] for text in sorted(entries)]

    def state(self, group: int, name: str) -> Iterator[tuple[str, Entry]]:
        entries = self.held_groups.get(group, {}).get(name, {})
        yield from [(text, entries[text]) for text in sorted(entries)]

    def keep_only(self, groups: range) -> None:
        for group in [g for g in self.held_groups if g not in groups]:
            del self.held_groups[group]

    def close(self) -> None:
        self.held_groups.clear()


class DiskBackend(CopyingBackend, Frozen):
    """An embedded RocksDB in ``path``: each entry under its key group (two bytes, big-endian),
    state name, NUL and canonical key, its value msgpack. ``seen``, given, opens a frozen copy
    (read only) that holds those key groups."""

    def __init__(self, path: Path, seen: set[int] | None = None) -> None:
        from rocksdict import AccessType, Options, Rdict, WriteOptions  # noqa: PLC0415

        options = Options(raw_mode=True)
        options.create_if_missing(True)
        options.set_write_buffer_size(WRITE_BUFFER)
        self.path = path
        frozen = seen is not None
        access = AccessType.read_only(False) if frozen else AccessType.read_write()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.db = Rdict(str(path), options, access_type=access)
        except Exception as e:
            raise self._failed("open", e) from None
        unlogged = WriteOptions()
        unlogged.disable_wal = True  # type: ignore[method-assign, assignment]  # a property
        self.db.set_write_options(unlogged)
        self.seen: set[int] = set() if seen is None else seen
        """Every key group written: ``groups`` gives these, some perhaps emptied since."""
        self.freezes = 0
        """The frozen copies made so far, which name the next one's directory."""

    def _failed(self, operation: str, error: Exception) -> StateStoreError:
        """What a failed ``operation`` raises, counted: RocksDB's own errors (a full disk, an
        unwritable directory) are plain Exceptions that name the file, not the state."""
        STATE_DISK_FAILURES.labels(operation).inc()
        return StateStoreError(f"keyed state on disk in {self.path} could not {operation}: {error}")

    @staticmethod
    def _key(group: int, name: str, text: str) -> bytes:
        return b"".join((struct.pack(">H", group), name.encode(), b"\0", text.encode()))

    def get(self, group: int, name: str, text: str) -> Entry | None:
        try:
            raw = self.db.get(self._key(group, name, text))
        except Exception as e:
            raise self._failed("read", e) from None
        return None if raw is None else msgpack.unpackb(raw, strict_map_key=False)

    def put(self, group: int, name: str, text: str, entry: Entry) -> bytes:
        value = msgpack.packb(entry)
        try:
            self.db[self._key(group, name, text)] = value
        except Exception as e:
            raise self._failed("write", e) from None
        self.seen.add(group)
        return value

    def delete(self, group: int, name: str, text: str) -> bool:
        key = self._key(group, name, text)
        try:
            if self.db.get(key) is None:
                return False
            del self.db[key]
        except Exception as e:
            raise self._failed("write", e) from None
        return True

    def groups(self) -> list[int]:
        return sorted(self.seen)

    def states(self, group: int) -> Iterator[tuple[str, list[Entry]]]:
        for name, values in self.encoded(group):
            yield name, [msgpack.unpackb(value, strict_map_key=False) for value in values]

    def encoded(self, group: int) -> Iterator[tuple[str, list[bytes]]]:
        name, values = b"", list[bytes]()
        for key, value in self._range(struct.pack(">H", group), struct.pack(">H", group + 1)):
            held = key[2 : key.index(b"\0", 2)]
            if held != name:
                if values:
                    yield name.decode(), values
                name, values = held, []
            values.append(value)
        if values:
            yield name.decode(), values

    def state(self, group: int, name: str) -> Iterator[tuple[str, Entry]]:
        """Read as they are taken, through a RocksDB iterator, which sees the database as it
        was when it was made."""
        prefix = struct.pack(">H", group) + name.encode()
        for key, value in self._range(prefix + b"\0", prefix + b"\1"):
            yield key[len(prefix) + 1 :].decode(), msgpack.unpackb(value, strict_map_key=False)

    def keep_only(self, groups: range) -> None:
        try:
            self.db.delete_range(struct.pack(">H", 0), struct.pack(">H", groups.start))
            self.db.delete_range(struct.pack(">H", groups.stop), LAST_KEY)
        except Exception as e:
            raise self._failed("write", e) from None
        self.seen = {group for group in self.seen if group in groups}

    def _range(self, start: bytes, stop: bytes) -> Iterator[tuple[bytes, bytes]]:
        """The raw keys and values from ``start`` up to ``stop``, in key order; a failed read
        is a StateStoreError."""
        from rocksdict import ReadOptions  # noqa: PLC0415

        within = ReadOptions()
        within.set_iterate_upper_bound(stop)
        try:
            yield from cast(Iterator[tuple[bytes, bytes]],  # raw mode
                            self.db.items(from_key=start, read_opt=within))  # fmt: skip
        except Exception as e:
            raise self._failed("read", e) from None

    def pinned(self) -> Callable[[int, str, str], bytes | None]:
        """Reads through a RocksDB snapshot taken now (its point reads see that moment; its
        iterators, in rocksdict, do not, which is why whole snapshots freeze a copy)."""
        view = self.db.snapshot()

        def get(group: int, name: str, text: str) -> bytes | None:
            try:
                return cast(bytes, view[self._key(group, name, text)])  # raw mode
            except Exception as e:
                if str(e) == NOT_FOUND:
                    return None
                raise self._failed("read", e) from None

        return get

    def frozen(self) -> DiskBackend:
        """A RocksDB checkpoint of what is held now, in a directory beside this one's (so its
        files are hard links), opened read only."""
        from rocksdict import Checkpoint  # noqa: PLC0415

        self.freezes += 1
        copy = self.path.with_name(f"{self.path.name}.frozen-{self.freezes}")
        try:
            Checkpoint(self.db).create_checkpoint(str(copy))
        except Exception as e:
            shutil.rmtree(copy, ignore_errors=True)
            raise self._failed("snapshot", e) from None
        return DiskBackend(copy, set(self.seen))

    def close(self) -> None:
        """Close the database and delete its directory; a database that failed may fail to
        close too, and its directory goes all the same."""
        try:
            self.db.close()
        except Exception as e:
            log.warning("%s", self._failed("close", e))
        shutil.rmtree(self.path, ignore_errors=True)


def sweep(state_dir: Path) -> list[Path]:
    """Delete what processes no longer running left under ``state_dir`` (a directory per
    process, named for its id); the directories deleted."""
    swept = []
    for child in sorted(state_dir.iterdir()) if state_dir.is_dir() else []:
        if child.name.isdigit() and not running(int(child.name)):
            shutil.rmtree(child, ignore_errors=True)
            swept.append(child)
    return swept


def backend_for(kind: str, path: Path) -> Backend:
    """The backend a job's ``state_backend`` names; ``path`` is the disk backend's own
    directory."""
    return DiskBackend(path) if kind == "disk" else MemoryBackend()
