"""A log entry on its way from member to member, and whom each member passes it on to.

The writer sends ``(position, bytes)`` in round 0 to ``fanout`` random members; a member that
receives a copy in round r passes it on to ``fanout`` random members in round r + 1, as long as
r + 1 is below ``rounds``. Every copy is passed on, not only the first one a member sees: with a
fixed fan-out f, the "forward only the first time" rule stops spreading once the members still
forwarding mostly hit members that already know, whatever the rounds, and leaves a fixed share
of the cluster uninformed (the root of z = 1 - exp(-f z): 6 % of members at f = 3). The round
number is what bounds the traffic instead: an entry costs exactly f + f^2 + ... + f^rounds
messages, a figure known in advance, and ``rounds_for`` picks the fewest rounds that make a
member's chance of missing an entry about n^-c. A member that receives a copy it already holds
still passes it on but stores it once (``reorder``).

Which members a copy goes to is drawn from a ``random.Random`` made from the copy itself
(``copy_rng``), so a run is reproducible whatever order copies arrive in, and two copies that
reach a member from different senders go on to different members.
"""

from __future__ import annotations

import math
import random
from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Rumor:
    """One copy of a log entry in flight: where it sits in the log, its encoded bytes, and the
    round it was sent in (the writer's own sends are round 0)."""

    position: int
    data: bytes
    round: int

    def __post_init__(self) -> None:
        if self.position < 0:
            raise ValueError(f"a rumor's log position must be 0 or more, not {self.position}")
        if self.round < 0:
            raise ValueError(f"a rumor's round must be 0 or more, not {self.round}")


@dataclass(frozen=True, slots=True)
class Spread:
    """How far an entry is gossiped: to ``fanout`` members per copy, for ``rounds`` rounds."""

    fanout: int = 3
    rounds: int = 6

    def __post_init__(self) -> None:
        if self.fanout < 1:
            raise ValueError(f"the gossip fan-out must be 1 or more, not {self.fanout}")
        if self.rounds < 1:
            raise ValueError(f"the gossip rounds must be 1 or more, not {self.rounds}")

    @classmethod
    def for_members(cls, members: int, fanout: int = 3, certainty: float = 1.0) -> Spread:
        """The spread for a cluster of ``members``, with the rounds from ``rounds_for``."""
        return cls(fanout=fanout, rounds=rounds_for(members, fanout, certainty))


@dataclass(frozen=True, slots=True)
class LiveMembers:
    """The ids of the live members, sorted and distinct, so that picking targets is a draw of
    indices (the cost of the fan-out, not of the cluster size) and the same on every member."""

    ids: tuple[str, ...]

    def __post_init__(self) -> None:
        if any(a >= b for a, b in zip(self.ids, self.ids[1:], strict=False)):
            raise ValueError(f"live member ids must be sorted and distinct: {self.ids[:10]!r}")

    @classmethod
    def of(cls, ids: Iterable[str]) -> LiveMembers:
        return cls(tuple(sorted(set(ids))))


@dataclass(frozen=True, slots=True)
class Sends:
    """What a member sends: ``rumor`` to each of ``targets`` (none after the last round)."""

    targets: tuple[str, ...]
    rumor: Rumor


def messages_per_entry(members: int, spread: Spread) -> int:
    """How many copies of one entry the cluster sends: f + f^2 + ... + f^rounds, where f is the
    fan-out or, in a cluster smaller than it, every other member."""
    f = min(spread.fanout, members - 1)
    return sum(f**k for k in range(1, spread.rounds + 1))


def rounds_for(members: int, fanout: int = 3, certainty: float = 1.0) -> int:
    """The fewest rounds whose messages number at least c·n·ln n (c = ``certainty``).

    Each message lands on one of the sender's n - 1 others at random, so a member is missed by
    all S of them with probability about exp(-S/n); S >= c·n·ln n makes that at most n^-c. With
    c = 1 about one member in the whole cluster misses each entry (and reads it from ZooKeeper
    once); c = 2 makes even that one unlikely (1/n). The count overshoots by less than a factor
    of the fan-out, as rounds come whole: at f = 3 and c = 1, 6 rounds for 200 members (5.5
    messages per member per entry), 8 for 1,000 (9.8)."""
    if members < 1:
        raise ValueError(f"a cluster has 1 member or more, not {members}")
    if certainty <= 0:
        raise ValueError(f"the gossip certainty must be above 0, not {certainty}")
    if members < 2:
        return 1
    needed = certainty * members * math.log(members)
    f = min(fanout, members - 1)
    rounds, sent, reached = 1, f, f
    while sent < needed:
        rounds, reached = rounds + 1, reached * f
        sent += reached
    return rounds


def copy_rng(member: str, sender: str, rumor: Rumor) -> random.Random:
    """The randomness ``member`` uses to pass on ``rumor`` received from ``sender``: a function of
    the copy alone (a string seed is hashed the same way in every process)."""
    return random.Random(f"{member}\x00{sender}\x00{rumor.position}\x00{rumor.round}")


def originate(
    position: int,
    data: bytes,
    writer: str,
    members: LiveMembers,
    *,
    rng: random.Random,
    spread: Spread,
) -> Sends:
    """What the writer of the entry at ``position`` sends once it is in the log: round 0."""
    rumor = Rumor(position, data, 0)
    return Sends(_targets(writer, members, rng, spread.fanout), rumor)


def forward(
    rumor: Rumor, member: str, members: LiveMembers, *, rng: random.Random, spread: Spread
) -> Sends:
    """What ``member`` sends on receiving ``rumor``: the next round to ``fanout`` random live
    members other than itself, or nothing when ``rumor`` came in the last round."""
    passed = Rumor(rumor.position, rumor.data, rumor.round + 1)
    if passed.round >= spread.rounds:
        return Sends((), passed)
    return Sends(_targets(member, members, rng, spread.fanout), passed)


def _targets(member: str, members: LiveMembers, rng: random.Random, fanout: int) -> tuple[str, ...]:
    """``fanout`` distinct live members other than ``member`` at random (all of them when there
    are fewer), in sorted order: indices into the others, skipping ``member``'s own."""
    ids = members.ids
    mine = bisect_left(ids, member)
    present = mine < len(ids) and ids[mine] == member
    others = len(ids) - present
    picks = rng.sample(range(others), min(fanout, others))
    return tuple(ids[i + (present and i >= mine)] for i in sorted(picks))
