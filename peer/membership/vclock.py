"""Vector clocks: the version of the gossiped membership state.

Every change to the state ticks the changing member's counter, so comparing two versions says
whether one state already contains the other's changes (take the newer one whole) or whether
they were made concurrently (merge them). Counters are kept as a sorted tuple of pairs, without
zeros, so equal clocks are equal values and hash alike on every member.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass


class Order(enum.Enum):
    """How one version relates to another, seen from the first."""

    SAME = "same"
    BEFORE = "before"
    AFTER = "after"
    CONCURRENT = "concurrent"


@dataclass(frozen=True, slots=True)
class VectorClock:
    """Counters per node, absent meaning zero: ``entries`` is sorted by node, counters positive."""

    entries: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        nodes = [node for node, _ in self.entries]
        if nodes != sorted(set(nodes)) or any(count <= 0 for _, count in self.entries):
            raise ValueError(f"not a normal vector clock: {self.entries!r}")

    @classmethod
    def of(cls, counters: Mapping[str, int]) -> VectorClock:
        """The clock with these counters, zeros dropped."""
        return cls(tuple(sorted((node, n) for node, n in counters.items() if n > 0)))

    def tick(self, node: str) -> VectorClock:
        """The version after one more change made at ``node``."""
        counters = dict(self.entries)
        counters[node] = counters.get(node, 0) + 1
        return VectorClock.of(counters)

    def merge(self, other: VectorClock) -> VectorClock:
        """The least version containing both: the pointwise maximum."""
        counters = dict(self.entries)
        for node, n in other.entries:
            counters[node] = max(counters.get(node, 0), n)
        return VectorClock.of(counters)

    def compare(self, other: VectorClock) -> Order:
        """Whether this version is the same as, before, after or concurrent with ``other``."""
        mine, theirs = dict(self.entries), dict(other.entries)
        nodes = mine.keys() | theirs.keys()
        ahead = any(mine.get(node, 0) > theirs.get(node, 0) for node in nodes)
        behind = any(mine.get(node, 0) < theirs.get(node, 0) for node in nodes)
        if ahead and behind:
            return Order.CONCURRENT
        if ahead:
            return Order.AFTER
        return Order.BEFORE if behind else Order.SAME
