"""Standby peers: for each running peer of a task that keeps a standby, a free peer ready to take
over its seat when its member fails (peer.log.takeover).

A standby must survive what kills the peer it stands by for, so it lives in another group; it
must be free to take the seat at once, so it runs nothing and stands by for no other peer. A
standby fetches every committed snapshot of its task, which is work thrown away when it moves,
so a standby still valid is kept, and the others are chosen from the free peers with the fewest
tags first (tagged peers are scarcer), then by id. Pure and deterministic like the schedulers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass

from peer.scheduling.demand import PeerInfo


@dataclass(frozen=True, slots=True)
class StandbyNeed:
    """A running ``peer`` of ``job`` that wants a standby: the standby must be outside
    ``group`` (the peer's) and carry the ``tags`` its task requires."""

    job: str
    peer: str
    group: str
    tags: frozenset[str] = frozenset()

    def suits(self, candidate: PeerInfo) -> bool:
        return candidate.group != self.group and self.tags <= candidate.tags


def choose_standbys(
    needs: Sequence[StandbyNeed],
    peers: Sequence[PeerInfo],
    allocated: Set[str],
    previous: Mapping[str, Mapping[str, str]],
) -> dict[str, dict[str, str]]:
    """Job to {running peer: standby} for ``needs`` (in priority order), from the active
    ``peers`` outside ``allocated``; ``previous`` (the same shape) is kept where still valid.
    A need no free peer suits gets no standby; a job with no standby is left out."""
    free = {p.id: p for p in peers if p.id not in allocated}
    chosen: dict[tuple[str, str], str] = {}
    taken: set[str] = set()
    for need in needs:
        kept = previous.get(need.job, {}).get(need.peer)
        if kept in free and kept not in taken and need.suits(free[kept]):
            chosen[need.job, need.peer] = kept
            taken.add(kept)
    order = sorted(free.values(), key=lambda p: (len(p.tags), p.id))
    for need in needs:
        if (need.job, need.peer) in chosen:
            continue
        pick = next((p.id for p in order if p.id not in taken and need.suits(p)), None)
        if pick is not None:
            chosen[need.job, need.peer] = pick
            taken.add(pick)
    out: dict[str, dict[str, str]] = {}
    for (job, peer), standby in sorted(chosen.items()):
        out.setdefault(job, {})[peer] = standby
    return out
