"""Reachability: what each monitor last observed of each member it watches.

Unreachable is an observation, not a decision: it can heal. Each observer owns its records and
bumps a record's version whenever its observation flips, so merging two tables keeps, per
(observer, subject), the record with the higher version, and the result does not depend on the
order in which tables meet. A subject is unreachable while any observer's latest record says so,
and reachable again only when every observer that had reported it says it is reachable again.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from pyrsistent import PMap, pmap


@dataclass(frozen=True, slots=True)
class Observation:
    """``observer``'s latest word on ``subject``; ``version`` counts its flips, from 1."""

    observer: str
    subject: str
    reachable: bool
    version: int

    def rank(self) -> tuple[int, bool]:
        """Merge keeps the record of higher rank: the later version; at an equal version, which
        a correct history never produces with different words, unreachable wins so that merge
        is still a deterministic join."""
        return (self.version, not self.reachable)


@dataclass(frozen=True, slots=True)
class Reachability:
    """Every observer's latest record on every subject it has ever reported unreachable.

    A pair without a record is reachable: observations that change nothing add nothing, so the
    table grows only with suspicions.
    """

    records: PMap[tuple[str, str], Observation] = field(default_factory=pmap)

    def observe(self, observer: str, subject: str, reachable: bool) -> Reachability:
        """The table after ``observer`` sees ``subject`` as ``reachable``; itself if that was
        already its word."""
        current = self.records.get((observer, subject))
        if (current.reachable if current else True) == reachable:
            return self
        version = current.version + 1 if current else 1
        record = Observation(observer, subject, reachable, version)
        return Reachability(self.records.set((observer, subject), record))

    def merge(self, other: Reachability) -> Reachability:
        """Per (observer, subject), the record of higher rank."""
        records = self.records.evolver()
        for key, theirs in other.records.items():
            mine = self.records.get(key)
            if mine is None or theirs.rank() > mine.rank():
                records[key] = theirs
        return Reachability(records.persistent())

    def unreachable_subjects(self, ignoring: Collection[str] = ()) -> frozenset[str]:
        """The subjects some observer, other than those ``ignoring`` (members downed or removed,
        whose last words no longer count), last said are unreachable."""
        return frozenset(
            record.subject
            for record in self.records.values()
            if not record.reachable and record.observer not in ignoring
        )
