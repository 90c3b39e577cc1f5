"""The members of a cluster as the log has them, and an operator's way of naming one.

A member is a peer group. Until the membership state is gossiped, its lifecycle is read from the
replica alone: a group in the middle of its three-phase join is joining, a joined one is up, and
one that has left the ring (downed by an operator, reported by a watcher, or gone by its own
leave) is down. A downed group never returns under its id: reading of its own departure, it
restarts with a fresh one (peer.log.entries.group_leave).
"""

from __future__ import annotations

from peer.log.replica import Replica
from peer.membership.gossip import Status


class MemberError(LookupError):
    """An operator named a member the cluster does not have, or not unambiguously."""


def lifecycle(replica: Replica) -> dict[str, Status]:
    """Every member the replica knows, sorted by id, with its status."""
    statuses = dict.fromkeys(replica.left, Status.DOWN)
    statuses |= dict.fromkeys(replica.joining(), Status.JOINING)
    statuses |= dict.fromkeys(replica.groups, Status.UP)
    return dict(sorted(statuses.items()))


def resolve(replica: Replica, name: str) -> str:
    """The id of the member ``name`` names: its whole id, or a prefix of one id alone (as
    `onyx replica` prints the first 8 characters). Only a joining or up member can be named:
    a downed one is gone for good."""
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
    if known[member] is Status.DOWN:
        raise MemberError(f"member {name!r}: {member} is down already")
    return member
