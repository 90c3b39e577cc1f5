"""The entries a member holds until it can consume them in log order.

Gossip delivers entries in any order, more than once, and sometimes not at all. The cache keeps
those at or after the next position the member needs, and hands them out only as a contiguous
run starting there, so every position is consumed exactly once and in order. It is bounded: when
it holds more than ``bound`` entries it drops the farthest positions first, the ones needed last,
which the member can read from ZooKeeper by position when their turn comes (``fallback``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from pyrsistent import PMap, pmap


@dataclass(frozen=True, slots=True)
class ReorderCache:
    """Entries by position waiting their turn, and ``next``, the position to consume next."""

    next: int
    bound: int
    held: PMap[int, bytes] = field(default_factory=pmap)

    def __post_init__(self) -> None:
        if self.next < 0:
            raise ValueError(f"the next log position must be 0 or more, not {self.next}")
        if self.bound < 1:
            raise ValueError(f"the reorder cache must hold 1 entry or more, not {self.bound}")

    def add(self, position: int, data: bytes) -> ReorderCache:
        """The cache holding the entry at ``position`` too, unless it was consumed already or is
        held; over the bound, without the farthest position (which may be this one)."""
        if position < self.next or position in self.held:
            return self
        held = self.held.set(position, data)
        if len(held) > self.bound:
            held = held.remove(max(held))
        return replace(self, held=held)

    def take(self) -> tuple[tuple[tuple[int, bytes], ...], ReorderCache]:
        """The contiguous run of entries from ``next`` on, as (position, bytes), and the cache
        without them, waiting for the position after the run."""
        position = self.next
        run = []
        held = self.held
        while position in held:
            run.append((position, held[position]))
            held = held.remove(position)
            position += 1
        return tuple(run), replace(self, next=position, held=held)

    def advance_to(self, position: int) -> ReorderCache:
        """The cache waiting for ``position``, having dropped what comes before it: for a member
        that has the replica up to ``position - 1`` from elsewhere (its origin, a transfer)."""
        if position < self.next:
            raise ValueError(
                f"the reorder cache cannot go back from position {self.next} to {position}"
            )
        return replace(
            self, next=position, held=pmap({p: d for p, d in self.held.items() if p >= position})
        )
