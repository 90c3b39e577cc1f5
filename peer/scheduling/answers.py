"""A scheduling server's memory of the allocations it computed, keyed by log position and
request digest.

Every member that applies the same entry sends the same request, so one computation per
position serves them all. The digest is part of the key: a member whose replica differs at that
position (a bug, or an older version) must get an answer to what it asked, never one computed
for another request. Members move forward through the log, so when the cache is full the oldest
positions go first.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyrsistent import PMap, pmap

from peer.scheduling.demand import Allocation


@dataclass(frozen=True, slots=True)
class AnswerCache:
    """At most ``capacity`` answers; ``put`` returns a new cache and leaves this one as it is."""

    capacity: int
    answers: PMap = field(default_factory=pmap)

    def __post_init__(self) -> None:
        if self.capacity < 1:
            raise ValueError(f"capacity must be at least 1, not {self.capacity}")

    def get(self, position: int, digest: str) -> Allocation | None:
        """The answer computed for exactly this request at this position, if kept."""
        return self.answers.get((position, digest))

    def put(self, position: int, digest: str, answer: Allocation) -> AnswerCache:
        """The cache with the answer kept, and, past capacity, the answers of the oldest
        positions (smallest digest first within a position) dropped."""
        key = (position, digest)
        if key in self.answers:
            return self
        answers = self.answers.set(key, answer)
        excess = len(answers) - self.capacity
        if excess > 0:
            evolver = answers.evolver()
            for old in sorted(answers)[:excess]:
                del evolver[old]
            answers = evolver.persistent()
        return AnswerCache(self.capacity, answers)
