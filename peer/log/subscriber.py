"""Reading the log in order: the origin first, then every entry after it.

When a gc has trimmed entries this reader had not applied yet, it cannot replay them; it
injects set-replica with the origin's replica instead and carries on after the origin. A gap in
positions alone proves nothing (sequence numbers are not promised to be contiguous), so the
origin decides: only an origin newer than the reader's position means entries were lost to it.
"""

from __future__ import annotations

import logging

from peer.log.apply import apply_entry
from peer.log.entries.gc import set_replica
from peer.log.entry import Entry
from peer.log.replica import Replica
from peer.log.store import LogStore

log = logging.getLogger(__name__)


def boot(store: LogStore) -> Replica:
    """The replica a newly started reader begins from."""
    origin = store.origin()
    if origin is not None:
        log.info("booted from origin at log position %d", origin.version)
        return origin
    return Replica()


def poll(store: LogStore, version: int) -> list[Entry]:
    """The entries to apply next to a replica at ``version``, possibly led by set-replica."""
    entries = store.read(after=version)
    if entries and entries[0].position == version + 1:
        return entries
    origin = store.origin()
    if origin is None or origin.version <= version:
        return entries
    log.warning(
        "log entries after position %d were trimmed by gc; jumping to the origin at %d",
        version,
        origin.version,
    )
    return [set_replica(origin), *(e for e in entries if e.position > origin.version)]


def catch_up(store: LogStore, replica: Replica | None = None) -> Replica:
    """The replica as of the current tail: boot (or go on from ``replica``), then apply
    everything there is."""
    replica = boot(store) if replica is None else replica
    while entries := poll(store, replica.version):
        for entry in entries:
            replica = apply_entry(replica, entry).new
    return replica
