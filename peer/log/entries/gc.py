"""gc and set-replica: keeping the log and the replica from growing without bound.

gc's caller, once it has applied the entry, stores that replica as the log's origin and deletes
every entry before it; peers that start later begin from the origin. The entry itself drops
what finished jobs left in the replica beyond what later entries need. set-replica is never
written: a subscriber that finds the entry it needed trimmed away injects it with the origin's
replica. Its argument is a Replica value, which no entry decoded from the log can carry, so a
set-replica found in the log is refused like any malformed entry.
"""

from __future__ import annotations

from pyrsistent import pmap

from peer.log.entry import Diff, Effects, Entry, EntryKind, Transition
from peer.log.replica import KEYS, Replica

FORGOTTEN = ("reasons", "names", "submitted", "rollbacks")
"""What a gc drops of finished jobs."""


def _apply_gc(replica: Replica, entry: Entry) -> Replica:
    """Finished jobs leave all but their outcome and hash: what a later submit-job under the
    same id needs to stay a no-op (and its submitter to be told whether it was the same job).
    Their reasons, names, submission times and rollback reasons go, so the origin grows by a
    few bytes per job however long the cluster runs."""
    finished = set(replica.finished)
    if not finished:
        return replica
    kept = {
        name: pmap({j: v for j, v in getattr(replica, name).items() if j not in finished})
        for name in FORGOTTEN
    }
    shrunk = {name: m for name, m in kept.items() if len(m) < len(getattr(replica, name))}
    return replica.evolve(**shrunk) if shrunk else replica


def _diff_gc(entry: Entry, old: Replica, new: Replica) -> Diff:
    return {"caller": entry.args["id"]}


def _effects_gc(t: Transition, actor: str, effects: Effects) -> None:
    if actor == t.entry.args["id"]:
        effects.store_origin(t.new)


GC = EntryKind(
    name="gc",
    args={"id": str},
    apply=_apply_gc,
    diff=_diff_gc,
    side_effects=_effects_gc,
    reads=KEYS,
    writes=frozenset(FORGOTTEN),
)
"""Its caller stores the whole replica as the origin: gc reads every key."""


def _apply_set_replica(replica: Replica, entry: Entry) -> Replica:
    return entry.args["replica"]


SET_REPLICA = EntryKind(
    name="set-replica",
    args={"replica": Replica},
    apply=_apply_set_replica,
    reads=frozenset(),
    writes=KEYS,
)
"""It replaces the replica whole, whatever the replica was."""


def set_replica(replica: Replica) -> Entry:
    """The entry a subscriber injects to jump to an origin, positioned at the origin."""
    return Entry(SET_REPLICA.name, {"replica": replica}, replica.version)


KINDS = (GC, SET_REPLICA)
