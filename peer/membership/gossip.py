"""The gossiped membership state: members' lifecycle and reachability, as a CRDT.

Every member holds one ``Gossip`` and changes it only by ticking its own counter of the version,
so two states compare by their versions: the newer one already holds the older one's changes and
is taken whole, and concurrent ones are merged field by field with joins (a member's status only
moves forward, a reachability record only to a later version). Merge is therefore commutative,
associative and idempotent, and members that keep exchanging states end up holding the same one.
The seen set says who holds the current version; once every member that counts has seen it,
the state has converged. Members holding the same state name the same leader.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace

from pyrsistent import PMap, pmap

from peer.membership.reachability import Reachability
from peer.membership.vclock import Order, VectorClock


class Status(enum.Enum):
    """A member's lifecycle, declared in its progress order, the order merge follows.

    The graceful path is joining < up < leaving < exiting < removed. Down is a decision (an
    operator's or the leader's) that a member is gone for good: it beats joining, up, leaving and
    exiting, so a concurrent leave or exit can never undo it and a member that crashed while
    leaving is not waited for. Removed, the tombstone that ends both the graceful and the downed
    path, beats everything. Nothing follows down but removed, so a downed member never returns
    under its identity: it restarts with a fresh one.
    """

    JOINING = "joining"
    UP = "up"
    LEAVING = "leaving"
    EXITING = "exiting"
    DOWN = "down"
    REMOVED = "removed"

    @property
    def progress(self) -> int:
        """The rank in the lifecycle: a higher rank wins a merge."""
        return _PROGRESS[self]


_PROGRESS = {status: rank for rank, status in enumerate(Status)}

GONE = frozenset({Status.DOWN, Status.REMOVED})
"""Members no longer taking part: not waited for by convergence, their observations void."""

LEADING = frozenset({Status.UP, Status.LEAVING})
"""The statuses a member may lead in."""


@dataclass(frozen=True, slots=True)
class Member:
    """A peer group (its group id) and where it is in its lifecycle."""

    id: str
    status: Status


@dataclass(frozen=True, slots=True)
class Gossip:
    """Members by id, reachability, the version and the members that have seen that version."""

    members: PMap[str, Member] = field(default_factory=pmap)
    reachability: Reachability = field(default_factory=Reachability)
    version: VectorClock = field(default_factory=VectorClock)
    seen: frozenset[str] = frozenset()

    def with_member_status(self, node: str, member: str, status: Status) -> Gossip:
        """The state after ``node`` moves ``member`` (added if new) to ``status``; itself if
        that would not move the member forward, so repeating a decision changes nothing."""
        current = self.members.get(member)
        if current is not None and status.progress <= current.status.progress:
            return self
        members = self.members.set(member, Member(member, status))
        return self._changed_at(node, members=members)

    def observe(self, node: str, subject: str, reachable: bool) -> Gossip:
        """The state after ``node``'s failure detector sees ``subject`` as ``reachable``;
        itself if that was already its word, so a detector may report every check."""
        reachability = self.reachability.observe(node, subject, reachable)
        if reachability is self.reachability:
            return self
        return self._changed_at(node, reachability=reachability)

    def seen_by(self, node: str) -> Gossip:
        """The state with ``node`` among those that have seen its version."""
        return self if node in self.seen else replace(self, seen=self.seen | {node})

    def merge(self, other: Gossip) -> Gossip:
        """The join of two states. A newer version already holds the older one's changes and is
        taken whole with its seen set; concurrent ones are joined field by field into a version
        nobody has seen yet; equal ones pool who has seen them. Equal versions hold the same
        changes, hence the same members and reachability (every change ticks its maker's
        counter, and joins are deterministic), so only the seen sets are joined: most merges,
        once a change has spread, cost a set union instead of a walk over every member."""
        order = self.version.compare(other.version)
        if order is Order.AFTER:
            return self
        if order is Order.BEFORE:
            return other
        if order is Order.SAME:
            return self if other.seen <= self.seen else replace(self, seen=self.seen | other.seen)
        return Gossip(
            members=_merge_members(self.members, other.members),
            reachability=self.reachability.merge(other.reachability),
            version=self.version.merge(other.version),
        )

    def receive(self, node: str, other: Gossip) -> Gossip:
        """What ``node``, holding this state, holds after taking in ``other``: the merge, which
        ``node`` has now seen."""
        return self.merge(other).seen_by(node)

    def gone(self) -> frozenset[str]:
        """The members downed or removed."""
        return frozenset(key for key, member in self.members.items() if member.status in GONE)

    def unreachable_members(self) -> frozenset[str]:
        """The subjects some member still taking part last said are unreachable: read once
        where every member is asked about."""
        return self.reachability.unreachable_subjects(ignoring=self.gone())

    def unreachable(self, subject: str) -> bool:
        """Whether a member still taking part last said ``subject`` is unreachable."""
        return subject in self.unreachable_members()

    def awaited(self) -> frozenset[str]:
        """The members whose view convergence waits for: all but the downed and removed."""
        return frozenset(self.members.keys()) - self.gone()

    def converged(self) -> bool:
        """Whether every awaited member has seen this version and none is unreachable: an
        unreachable member cannot confirm what it saw, so it blocks convergence (and with it
        the leader) until it is reachable again or downed."""
        awaited = self.awaited()
        return awaited <= self.seen and not awaited & self.unreachable_members()

    def leader(self) -> str | None:
        """The first up or leaving member in sorted order that no member taking part holds
        unreachable: the same on every member holding this state. It needs no convergence, as
        its first duty, downing a member unreachable for too long, comes exactly when an
        unreachable member blocks convergence; its other duties (joining to up, exiting to
        removed) wait for ``converged`` as well."""
        unreachable = self.unreachable_members()
        leading = (
            key
            for key in sorted(self.members)
            if self.members[key].status in LEADING and key not in unreachable
        )
        return next(leading, None)

    def _changed_at(
        self,
        node: str,
        *,
        members: PMap[str, Member] | None = None,
        reachability: Reachability | None = None,
    ) -> Gossip:
        """A change made at ``node`` to the members or the reachability given (the others kept):
        a new version that only ``node`` has seen."""
        return replace(
            self,
            members=self.members if members is None else members,
            reachability=self.reachability if reachability is None else reachability,
            version=self.version.tick(node),
            seen=frozenset({node}),
        )


def _merge_members(mine: PMap[str, Member], theirs: PMap[str, Member]) -> PMap[str, Member]:
    """Per member, the status further along."""
    merged = mine.evolver()
    for key, member in theirs.items():
        current = mine.get(key)
        if current is None or member.status.progress > current.status.progress:
            merged[key] = member
    return merged.persistent()
