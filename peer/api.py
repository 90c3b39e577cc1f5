"""The public API: what a client (the CLI, a test, an operator's script) does to a cluster
without joining it."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from peer.log import subscriber
from peer.log.apply import apply_entry
from peer.log.entries.gc import GC
from peer.log.replica import Replica
from peer.log.store import LogStore, StoreError, store_origin_and_trim
from peer.log.stores.zookeeper import ZooKeeperStore


def connect(
    zookeeper: str,
    tenancy: str,
    *,
    create: bool = False,
    session_timeout: float = 10.0,
    connect_timeout: float = 10.0,
) -> ZooKeeperStore:
    return ZooKeeperStore(
        zookeeper,
        tenancy,
        create=create,
        session_timeout=session_timeout,
        connect_timeout=connect_timeout,
    )


def replica(store: LogStore) -> Replica:
    """The cluster's state as of the log's current tail."""
    return subscriber.catch_up(store)


@dataclass(frozen=True)
class GcResult:
    position: int
    deleted: int


class _GcCaller:
    """The Effects of a client that called gc: the gc entry's side effect stores the origin."""

    def __init__(self, store: LogStore) -> None:
        self.store, self.deleted = store, 0

    def store_origin(self, replica: Replica) -> None:
        self.deleted = store_origin_and_trim(self.store, replica)


def gc(store: LogStore, caller: str, timeout: float = 30.0) -> GcResult:
    """Append gc, play the log up to it, then store the origin and trim what precedes it."""
    position = store.append(GC.entry(id=caller))
    wakeup = threading.Event()
    store.on_append(wakeup.set)
    effects = _GcCaller(store)
    current = subscriber.boot(store)
    deadline = time.monotonic() + timeout
    while True:
        wakeup.clear()
        for entry in subscriber.poll(store, current.version):
            if entry.position > position:
                break
            t = apply_entry(current, entry)
            current = t.new
            t.side_effects(caller, effects)
        if current.version >= position:
            return GcResult(position, effects.deleted)
        if time.monotonic() > deadline:
            raise StoreError(f"gc entry at position {position} was not read back in {timeout:g} s")
        wakeup.wait(0.5)
