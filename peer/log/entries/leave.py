"""member-leave and member-exit: the first two steps of a graceful leave.

An operator's `onyx leave` writes member-leave: the member is leaving, keeps its work, and lets
its jobs commit the epoch they are in, so what moves is as fresh as a checkpoint can be. The
member itself then writes member-exit: it is exiting, the schedulers give its peers nothing
more, and its work moves to the others from that checkpoint. The third step is the membership
leader's group-leave-cluster, which removes it (peer.log.entries.group_leave); reading of its
own removal, the member stops. A member that dies on the way is downed like any other: down
beats leaving and exiting.
"""

from __future__ import annotations

from peer.log.entry import Diff, Effects, Entry, EntryKind, Transition
from peer.log.replica import Replica


def _leave(replica: Replica, entry: Entry) -> Replica:
    """Only a joined member that is not leaving already can begin to leave."""
    member = entry.args["id"]
    if member not in replica.groups or member in replica.leaving or member in replica.exiting:
        return replica
    return replica.evolve(leaving=replica.leaving.add(member))


def _exit(replica: Replica, entry: Entry) -> Replica:
    member = entry.args["id"]
    if member not in replica.leaving:
        return replica
    return replica.evolve(
        leaving=replica.leaving.discard(member), exiting=replica.exiting.add(member)
    )


def _diff(entry: Entry, old: Replica, new: Replica) -> Diff:
    return None if old is new else {"member": entry.args["id"]}


def _hand_over(t: Transition, group: str, effects: Effects) -> None:
    """The group's hand-over reads which of its peers work on which jobs (its allocations and
    jobs), so member-leave reads them too."""
    if t.diff is not None and t.diff["member"] == group:
        effects.hand_over()


LEAVE = EntryKind(
    name="member-leave",
    args={"id": str},
    apply=_leave,
    diff=_diff,
    side_effects=_hand_over,
    reads=frozenset({"groups", "leaving", "exiting", "allocations", "jobs"}),
    writes=frozenset({"leaving"}),
)

EXIT = EntryKind(
    name="member-exit",
    args={"id": str},
    apply=_exit,
    diff=_diff,
    reads=frozenset({"leaving", "exiting"}),
    writes=frozenset({"leaving", "exiting"}),
)

KINDS = (LEAVE, EXIT)
