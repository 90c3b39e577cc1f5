"""Applying one entry: the single step every peer group takes, identically, for every entry."""

from __future__ import annotations

import logging

from peer.log.allocation import ALLOCATION_WRITES, reallocate
from peer.log.entries import KINDS
from peer.log.entry import UNDECODABLE, Entry, EntryKind, InvalidEntry, Transition
from peer.log.replica import Replica
from peer.log.versions import stamped
from peer.scheduling.request import Planner, plan_here
from peer.values.limits import cut

log = logging.getLogger(__name__)

KIND_SHOWN = 40
"""How much of an unknown kind's name a refusal shows: the name is the entry's, and may be long."""


def kind_of(entry: Entry) -> EntryKind:
    if not entry.fn and UNDECODABLE in entry.args:
        raise InvalidEntry(f"undecodable: {entry.args[UNDECODABLE]}")
    kind = KINDS.get(entry.fn)
    if kind is None:
        raise InvalidEntry(f"unknown kind of entry {cut(entry.fn, KIND_SHOWN)!r}")
    kind.validate(entry)
    return kind


def apply_entry(replica: Replica, entry: Entry, planner: Planner = plan_here) -> Transition:
    """The replica after ``entry``, at the entry's position.

    A malformed entry, or one of no known kind, changes nothing but the version: every peer
    refuses it the same way, so all replicas at that position still agree. The kind's diff sees
    the replica before the version is stamped, so an entry that changed nothing diffs as such.
    Peers are then reallocated to jobs if the entry changed either; ``planner`` computes the
    allocation, and every planner gives the same one.

    Whatever else applying, validating, reallocating or diffing raises is a refusal too. Each of
    them is a pure function of the replica and the entry, so what raises for one replica raises
    for every replica at that position alike (the decoder has already refused what is too
    large or too deep to handle without depending on the machine); and a group, or a client
    replaying the log, that died on an entry instead would die on it again at every restart.
    Catching broadly is what keeps one bad entry from taking down the cluster. Only running out
    of memory is the machine's, not the entry's, and is left to end the process.
    """
    try:
        kind = kind_of(entry)
        changed = kind.apply(replica, entry)
        applied = reallocate(replica, changed, entry.position, planner)
        diff = kind.diff(entry, replica, applied)
    except MemoryError:
        raise
    except Exception as refused:
        return refuse(replica, entry, refused)
    versions = own_versions(replica, changed, entry.position, kind.writes)
    if applied is not changed:
        versions = stamped(versions, changed, applied, entry.position, ALLOCATION_WRITES)
    new = applied.evolve(version=entry.position, key_versions=versions)
    return Transition(entry, replica, new, diff, kind)


def own_versions(
    old: Replica, changed: Replica, position: int, writes: frozenset[str]
) -> tuple[int, ...]:
    """The key versions after a kind's own change from ``old`` to ``changed`` at ``position``,
    before any allocation; only the keys it ``writes`` can have changed. A kind that brought
    versions of its own (the set-replica that jumps to an origin, whose versions are the
    origin's) keeps them."""
    if changed.key_versions is not old.key_versions:
        return changed.key_versions
    return stamped(old.key_versions, old, changed, position, writes)


def refuse(replica: Replica, entry: Entry, refused: Exception) -> Transition:
    """The transition of an entry every peer refuses: only the version moves."""
    reason = str(refused) if isinstance(refused, InvalidEntry) else _described(refused)
    log.warning(
        "log entry %d ignored (%s, %s): %s",
        entry.position,
        _kind_label(entry),
        _size_label(entry),
        cut(reason),
    )
    return Transition(entry, replica, replica.evolve(version=entry.position), None)


def _described(error: Exception) -> str:
    return f"applying it raised {type(error).__name__}: {error}"


def _kind_label(entry: Entry) -> str:
    return repr(cut(entry.fn, KIND_SHOWN)) if entry.fn else "no kind"


def _size_label(entry: Entry) -> str:
    """The entry's size as read from the log; one made in this process is measured here."""
    size = entry.size
    if size < 0:
        try:
            size = len(entry.encode())
        except (ValueError, TypeError, RecursionError):
            return "size unknown"
    return f"{size:,} bytes"
