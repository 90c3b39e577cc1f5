"""The embedded log store: one shared log in this process, one session per peer group.

It behaves like the ZooKeeper store where the protocol can tell the difference: entries are
stored encoded and decoded on every read (no group can share another's objects), pulses belong
to a session and vanish when it ends or expires, watches fire from another thread, and a commit
record carries a version that every write checks and bumps, as a znode's does.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable

from peer.log.entry import Entry
from peer.log.replica import EMPTY_VERSION, Replica
from peer.log.store import encoded


class MemoryLog:
    """The shared state a ZooKeeper ensemble would hold for one tenancy."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.entries: dict[int, bytes] = {}
        self.next_position = 0
        self.origin: Replica | None = None
        self.pulses: dict[str, MemoryStore] = {}
        self.pulse_sites: dict[str, str] = {}
        self.append_callbacks: list[Callable[[], None]] = []
        self.pulse_watches: dict[str, dict[int, Callable[[str], None]]] = {}
        self.commits: dict[str, tuple[bytes, int]] = {}
        self.watch_ids = itertools.count()

    def session(self) -> MemoryStore:
        return MemoryStore(self)

    def fire_pulse_gone(self, group: str) -> None:
        for callback in self.pulse_watches.pop(group, {}).values():
            threading.Thread(target=callback, args=(group,), daemon=True).start()


class MemoryStore:
    """One session on a MemoryLog."""

    def __init__(self, log: MemoryLog) -> None:
        self.log = log
        self.lost_callbacks: list[Callable[[], None]] = []
        self.connected = True
        """Always, unless a test takes the server away."""

    def append(self, entry: Entry) -> int:
        data = encoded(entry)
        with self.log.lock:
            position = self.log.next_position
            self.log.entries[position] = data
            self.log.next_position += 1
            callbacks = list(self.log.append_callbacks)
        for callback in callbacks:
            callback()
        return position

    def tail(self) -> int:
        with self.log.lock:
            return self.log.next_position - 1

    def read(self, after: int) -> list[Entry]:
        with self.log.lock:
            positions = sorted(p for p in self.log.entries if p > after)
            return [Entry.decode(self.log.entries[p], p) for p in positions]

    def read_at(self, position: int) -> Entry | None:
        with self.log.lock:
            data = self.log.entries.get(position)
        return None if data is None else Entry.decode(data, position)

    def on_append(self, callback: Callable[[], None]) -> None:
        with self.log.lock:
            self.log.append_callbacks.append(callback)

    def origin(self) -> Replica | None:
        return self.log.origin

    def origin_version(self) -> int:
        origin = self.log.origin
        return EMPTY_VERSION if origin is None else origin.version

    def store_origin(self, replica: Replica) -> bool:
        with self.log.lock:
            if self.log.origin is not None and self.log.origin.version >= replica.version:
                return False
            self.log.origin = replica
            return True

    def trim(self, before: int) -> int:
        with self.log.lock:
            doomed = [p for p in self.log.entries if p < before]
            for p in doomed:
                del self.log.entries[p]
            return len(doomed)

    def register_pulse(self, group: str, site: str | None = None) -> None:
        with self.log.lock:
            self.log.pulses[group] = self
            if site is not None:
                self.log.pulse_sites[group] = site

    def pulse_sites(self) -> dict[str, str]:
        with self.log.lock:
            return {g: s for g, s in self.log.pulse_sites.items() if g in self.log.pulses}

    def remove_pulse(self, group: str) -> None:
        with self.log.lock:
            if self.log.pulses.get(group) is self:
                del self.log.pulses[group]
                self.log.pulse_sites.pop(group, None)
                self.log.fire_pulse_gone(group)

    def pulse_exists(self, group: str) -> bool:
        with self.log.lock:
            return group in self.log.pulses

    def watch_pulse(self, group: str, on_gone: Callable[[str], None]) -> Callable[[], None]:
        with self.log.lock:
            if group not in self.log.pulses:
                threading.Thread(target=on_gone, args=(group,), daemon=True).start()
                return lambda: None
            key = next(self.log.watch_ids)
            self.log.pulse_watches.setdefault(group, {})[key] = on_gone

        def cancel() -> None:
            with self.log.lock:
                self.log.pulse_watches.get(group, {}).pop(key, None)

        return cancel

    def on_session_lost(self, callback: Callable[[], None]) -> None:
        self.lost_callbacks.append(callback)

    def read_commit(self, job: str) -> tuple[bytes | None, int]:
        with self.log.lock:
            return self.log.commits.get(job, (None, -1))

    def write_commit(self, job: str, data: bytes, expected: int) -> int | None:
        with self.log.lock:
            _, version = self.read_commit(job)
            if version != expected:
                return None
            self.log.commits[job] = (data, version + 1)
            return version + 1

    def delete_commit(self, job: str) -> None:
        with self.log.lock:
            self.log.commits.pop(job, None)

    def expire(self) -> None:
        """What ZooKeeper does to a session it has not heard from: drop its pulses, tell it."""
        self._drop_pulses()
        for callback in list(self.lost_callbacks):
            callback()

    def close(self) -> None:
        self._drop_pulses()

    def _drop_pulses(self) -> None:
        with self.log.lock:
            for group in [g for g, owner in self.log.pulses.items() if owner is self]:
                self.remove_pulse(group)
