"""Who monitors whom: each member watches the next few members after it on a hashed ring.

Heartbeats from every member to every other would cost n^2; a few monitors per member are
enough, since one monitor's observation that a member is unreachable spreads by gossip. The
members are placed on a ring ordered by a stable hash of their ids rather than by the ids
themselves, so neighbours on the ring are unrelated by name: ids that share a host or a rack
prefix do not end up watching one another, and a lost rack still has monitors outside it. Every
member computes the same ring from the same members (the replica), so the observers of a subject
agree among themselves and every member is watched by exactly ``min(k, n - 1)`` others: full
coverage without any negotiation.

The hash is CRC-32 of the id's UTF-8 bytes, ties broken by the id: stable across processes and
Python versions, unlike ``hash()``, which is salted per process.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

#: Monitors per member, as in Akka Cluster.
DEFAULT_MONITORS = 5


def ring(members: Iterable[str]) -> tuple[str, ...]:
    """The members in ring order, whatever order (and repeats) they come in."""
    return tuple(sorted(set(members), key=lambda m: (zlib.crc32(m.encode()), m)))


def receivers(members: Iterable[str], observer: str, k: int = DEFAULT_MONITORS) -> tuple[str, ...]:
    """Whom ``observer`` sends heartbeat requests to: the ``min(k, n - 1)`` members after it on
    the ring, nearest first."""
    order, at, count = _place(members, observer, k)
    return tuple(order[(at + step) % len(order)] for step in range(1, count + 1))


def monitors_of(members: Iterable[str], subject: str, k: int = DEFAULT_MONITORS) -> tuple[str, ...]:
    """Who watches ``subject``: the ``min(k, n - 1)`` members before it on the ring, nearest
    first, the ones whose ``receivers`` include it."""
    order, at, count = _place(members, subject, k)
    return tuple(order[(at - step) % len(order)] for step in range(1, count + 1))


def _place(members: Iterable[str], member: str, k: int) -> tuple[tuple[str, ...], int, int]:
    """The ring, ``member``'s place on it, and how many neighbours a member has."""
    if k < 1:
        raise ValueError(f"monitors per member must be at least 1, not {k}")
    order = ring(members)
    if member not in order:
        raise ValueError(f"{member!r} is not a member")
    return order, order.index(member), min(k, len(order) - 1)
