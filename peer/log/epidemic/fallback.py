"""When a member stops waiting for gossip and reads the log itself, and where.

Gossip is the fast path; ZooKeeper stays the record. A member that has consumed nothing for
``silence`` seconds reads the one znode it needs next, by its position: it never lists or
watches the log directory, so the reads ZooKeeper serves scale with the entries gossip failed to
deliver, not with members times entries. A read that finds the entry says the member is behind,
so the following position is read at once (catching up a backlog costs one read per entry); a
read that finds nothing backs off before looking again, and never busy polls.

An entry nobody gossips (one the command line wrote, which has no transport) would be read by
every member. So one member per position, its ``scout`` (drawn from the position, the same on
every member), reads after one silence and starts the entry's rumor; the others read after two
silences and a quarter, always a quarter silence off the scout's reads, which leaves the
scout's rumor time to reach them first.

A read that finds nothing cannot tell the log's end from an entry a gc trimmed; one small read
of the origin's version tells them apart (``trimmed``), and the origin itself is fetched only
when it replaces the missing entry. An idle log thus costs the scout two small reads per
silence and every other member two per two silences: about one read per member per silence.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

OTHERS_FIRST = 2.25
"""Silences a member that is not the next position's scout waits after consuming an entry."""
OTHERS_AGAIN = 2.0
"""Silences it waits after a read that found nothing: a whole number, so that its reads stay
a quarter silence off the scout's, which come one silence apart."""


@dataclass(frozen=True, slots=True)
class Fallback:
    """The configured ``silence`` (seconds) and ``due_at``, the time a read becomes due."""

    silence: float
    due_at: float

    def __post_init__(self) -> None:
        if not self.silence > 0:
            raise ValueError(
                f"the gossip silence before reading the log must be above 0 s, not {self.silence}"
            )

    @classmethod
    def start(cls, now: float, silence: float) -> Fallback:
        """A member that starts listening at ``now`` gives gossip one silence first."""
        return cls(silence, now + silence)

    def position_to_read(self, now: float, next_position: int) -> int | None:
        """The position to read from the log at ``now``, the next the member needs, once the
        read is due; None before."""
        return next_position if now >= self.due_at else None

    def after_consumed(self, now: float, scout: bool = True) -> Fallback:
        """An entry was consumed at ``now``: the log is read only after a silence from then (the
        next position's scout) or two and a quarter (everyone else)."""
        return replace(self, due_at=now + self.silence * (1.0 if scout else OTHERS_FIRST))

    def after_read(self, now: float, found: bool, scout: bool = True) -> Fallback:
        """A read at ``now`` found the entry (read the following one at once: the member is
        behind) or found nothing (look again after a silence, or two for all but the scout)."""
        if found:
            return replace(self, due_at=now)
        return replace(self, due_at=now + self.silence * (1.0 if scout else OTHERS_AGAIN))


def scout(position: int, members: tuple[str, ...]) -> str | None:
    """The member that reads ``position`` first and gossips it when nobody has: one of the
    sorted ``members`` that take rumors, drawn from the position alone, so every member draws
    the same one; None when there are none."""
    if not members:
        return None
    return members[random.Random(f"scout\x00{position}").randrange(len(members))]


def trimmed(position: int, origin_version: int) -> bool:
    """Whether ``position``, found missing, was trimmed by a gc rather than not written yet:
    exactly when the origin, of ``origin_version``, reaches it. gc stores the origin before it
    trims, and an origin never reaches past the log's tail, so a position not written yet is
    always past the origin."""
    return origin_version >= position
