"""The leader's auto-down: a member unreachable for long enough is downed.

Unreachable is an observation and heals; down is a decision and does not (its peers' work moves
and it never returns under its id). The leader alone decides, after ``after`` seconds of
unreachability as it has seen them: long enough that a member paused by a long collection or a
busy disk comes back first, short enough that work on a dead member does not wait for
ZooKeeper's session timeout. Every member keeps the clocks, so a member that becomes the leader
(the old one was the one unreachable) goes on from what it saw rather than starting over.

Only the majority side downs. In a partition each side holds the other unreachable and each has
a leader of its own; were both to down the other, the minority's downs (written once its link to
ZooKeeper comes back) would restart the majority. So a leader downs only while the members it
can reach, itself included, are more than half of those taking part, or exactly half and the
lowest id among them. The price: in a cluster of two, the death of the lower member is left to
its ZooKeeper session expiring, and so is the death of half a cluster at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from peer.membership.gossip import GONE, Gossip


@dataclass(frozen=True)
class AutoDown:
    after: float | None
    """Seconds of unreachability before the leader downs a member; None: never by itself."""
    since: dict[str, float] = field(default_factory=dict)
    """When each member now unreachable was first seen so here, sorted by id."""

    def seen(self, state: Gossip, now: float) -> AutoDown:
        """The clocks after looking at ``state`` at ``now``: started for members newly
        unreachable, dropped for those reachable again or gone."""
        held = state.unreachable_members()
        unreachable = sorted(
            member
            for member, record in state.members.items()
            if record.status not in GONE and member in held
        )
        since = {member: self.since.get(member, now) for member in unreachable}
        return replace(self, since=since)

    def due(self, state: Gossip, me: str, now: float) -> tuple[str, ...]:
        """The members ``me`` downs now: none unless it leads ``state``, else those unreachable
        for ``after`` seconds or more."""
        if self.after is None or not self.since or state.leader() != me or not majority(state):
            return ()
        return tuple(m for m, since in self.since.items() if now - since >= self.after)


def majority(state: Gossip) -> bool:
    """Whether the members not held unreachable in ``state`` are the side that may down the
    others: more than half of those taking part, or half with the lowest id among them."""
    taking_part = sorted(state.awaited())
    unreachable = state.unreachable_members()
    reachable = [m for m in taking_part if m not in unreachable]
    if 2 * len(reachable) != len(taking_part):
        return 2 * len(reachable) > len(taking_part)
    return bool(reachable) and reachable[0] == taking_part[0]
