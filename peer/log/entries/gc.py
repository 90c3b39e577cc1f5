"""gc and set-replica: keeping the log and the replica from growing without bound.

gc's caller, once it has applied the entry, stores that replica as the log's origin and deletes
every entry before it; peers that start later begin from the origin. set-replica is never
written: a subscriber that finds the entry it needed trimmed away injects it with the origin's
replica. Its argument is a Replica value, which no entry decoded from the log can carry, so a
set-replica found in the log is refused like any malformed entry.
"""

from __future__ import annotations

from peer.log.entry import Diff, Effects, Entry, EntryKind, Transition
from peer.log.replica import Replica


def _apply_gc(replica: Replica, entry: Entry) -> Replica:
    """Nothing to compress until jobs exist; the next issue drops finished jobs here."""
    return replica


def _diff_gc(entry: Entry, old: Replica, new: Replica) -> Diff:
    return {"caller": entry.args["id"]}


def _effects_gc(t: Transition, actor: str, effects: Effects) -> None:
    if actor == t.entry.args["id"]:
        effects.store_origin(t.new)


GC = EntryKind(
    name="gc", args={"id": str}, apply=_apply_gc, diff=_diff_gc, side_effects=_effects_gc
)


def _apply_set_replica(replica: Replica, entry: Entry) -> Replica:
    return entry.args["replica"]


SET_REPLICA = EntryKind(name="set-replica", args={"replica": Replica}, apply=_apply_set_replica)


def set_replica(replica: Replica) -> Entry:
    """The entry a subscriber injects to jump to an origin, positioned at the origin."""
    return Entry(SET_REPLICA.name, {"replica": replica}, replica.version)


KINDS = (GC, SET_REPLICA)
