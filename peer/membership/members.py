"""The members of a cluster as the log has them, and an operator's way of naming one.

A member is a peer group, and the log is where its lifecycle is decided: a group in the middle
of its three-phase join is joining, a joined one is up, then leaving and exiting on a graceful
leave (peer.log.entries.leave); one that has left the ring is removed if it had exited and down
otherwise (downed by an operator or the leader, reported by a watcher, or stopped by a signal,
which leaves at once). A downed group never returns under its id: reading of its own departure,
it restarts with a fresh one (peer.log.entries.group_leave).
"""

from __future__ import annotations

from peer.log.replica import Replica
from peer.membership.gossip import GONE, Status


class MemberError(LookupError):
    """An operator named a member the cluster does not have, or not unambiguously."""


def lifecycle(replica: Replica) -> dict[str, Status]:
    """Every member the replica knows, sorted by id, with its status."""
    statuses = dict.fromkeys(replica.left, Status.DOWN)
    statuses |= dict.fromkeys(replica.removed, Status.REMOVED)
    statuses |= dict.fromkeys(replica.joining(), Status.JOINING)
    statuses |= dict.fromkeys(replica.groups, Status.UP)
    statuses |= dict.fromkeys(replica.leaving, Status.LEAVING)
    statuses |= dict.fromkeys(replica.exiting, Status.EXITING)
    return dict(sorted(statuses.items()))


def resolve(replica: Replica, name: str) -> str:
    """The id of the member ``name`` names: its whole id, or a prefix of one id alone (as
    `onyx replica` prints the first 8 characters). A downed or removed one is gone for good and
    cannot be named."""
    known = lifecycle(replica)
    if name in known:
        matches = [name]
    else:
        matches = [member for member in known if name and member.startswith(name)]
    if not matches:
        raise MemberError(f"member {name!r}: no member of this cluster has that id or prefix")
    if len(matches) > 1:
        listed = ", ".join(matches)
        raise MemberError(f"member {name!r}: the prefix names {len(matches)} members: {listed}")
    member = matches[0]
    if known[member] in GONE:
        raise MemberError(f"member {name!r}: {member} is {known[member].value} already")
    return member
