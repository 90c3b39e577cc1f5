"""Applying one entry: the single step every peer group takes, identically, for every entry."""

from __future__ import annotations

import logging

from peer.log.allocation import reallocate
from peer.log.entries import KINDS
from peer.log.entry import Entry, EntryKind, InvalidEntry, Transition
from peer.log.replica import Replica

log = logging.getLogger(__name__)


def kind_of(entry: Entry) -> EntryKind:
    kind = KINDS.get(entry.fn)
    if kind is None:
        raise InvalidEntry(f"unknown kind of entry {entry.fn!r} (args {dict(entry.args)!r})")
    kind.validate(entry)
    return kind


def apply_entry(replica: Replica, entry: Entry) -> Transition:
    """The replica after ``entry``, at the entry's position.

    A malformed entry, or one of no known kind, changes nothing but the version: every peer
    refuses it the same way, so all replicas at that position still agree. The kind's diff sees
    the replica before the version is stamped, so an entry that changed nothing diffs as such.
    Peers are then reallocated to jobs if the entry changed either.
    """
    try:
        kind = kind_of(entry)
        applied = kind.apply(replica, entry)
    except InvalidEntry as refused:
        log.warning("log entry %d ignored: %s", entry.position, refused)
        return Transition(entry, replica, replica.evolve(version=entry.position), None)
    applied = reallocate(replica, applied, entry.position)
    diff = kind.diff(entry, replica, applied)
    return Transition(entry, replica, applied.evolve(version=entry.position), diff, kind)
