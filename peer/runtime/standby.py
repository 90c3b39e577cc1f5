"""This group's standby peers: each holds the latest committed snapshot of the seat it stands by
for (with its chain's keyed state, peer.runtime.snapshot), so that taking the seat over starts
from memory, not from storage.

The log names a standby for each seat of a task that asks for one (the placement's
``standbys``, on another member than the seat's peer). The job's coordinator tells standbys of
every commit as it tells the job's peers, and each fetches its seat's snapshot of that epoch in
the background, dropping the one before: of its keyed state, only the snapshots the one before
did not already hold (a chain's new links). When the seat's peer fails and the standby takes it
over, the runner it becomes asks here first (``fetch``): the snapshot of the epoch it restores
is usually here already.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass

from peer.runtime.checkpoints import CheckpointStorage
from peer.runtime.placement import Placement
from peer.runtime.snapshot import Restored
from peer.values.epoch import Epoch


@dataclass(frozen=True, slots=True)
class Watch:
    """The seat a standby peer stands by for."""

    job: str
    task: str
    slot: int


class Standbys:
    def __init__(self, storage: CheckpointStorage | None) -> None:
        self.storage = storage
        self.watching: dict[str, Watch] = {}
        """This group's standby peers, each with its seat."""
        self.held: dict[Watch, tuple[Epoch, Future[Restored]]] = {}

    def sync(self, placements: Mapping[str, Placement], mine: Iterable[str]) -> None:
        """The standbys as the log now has them: the snapshots of seats no longer watched go."""
        own = set(mine)
        watching: dict[str, Watch] = {}
        for job_id, placement in sorted(placements.items()):
            for peer, standby in sorted(placement.standbys.items()):
                if standby in own and peer in placement.tasks:
                    task = placement.tasks[peer]
                    watching[standby] = Watch(job_id, task, placement.slots[peer])
        self.watching = watching
        kept = set(watching.values()) | {
            Watch(job_id, placement.tasks[peer], placement.slots[peer])
            for job_id, placement in placements.items()
            for peer in placement.recovering & own
            if peer in placement.tasks
        }  # a standby that took its seat over has yet to restore from what it holds
        for watch in sorted(set(self.held) - kept, key=repr):
            self.held.pop(watch)[1].cancel()

    def committed(self, standby: str, epoch: Epoch) -> None:
        """``epoch`` of the job ``standby`` watches is committed: fetch its seat's snapshot."""
        watch = self.watching.get(standby)
        if watch is None or self.storage is None:
            return
        previous = self.held.get(watch)
        if previous is not None and previous[0] == epoch:
            return
        held = None
        if previous is not None and previous[1].done() and not _failed(previous[1]):
            held = (previous[0], previous[1].result())  # its chain is not read again
        restore = self.storage.restore(watch.job, epoch, watch.task, watch.slot, held=held)
        self.held[watch] = (epoch, restore)

    def fetch(self, job: str, epoch: Epoch, task: str, slot: int) -> Future[Restored] | None:
        """The snapshot held of that seat at that epoch, if it is the one held."""
        held = self.held.get(Watch(job, task, slot))
        if held is None or held[0] != epoch:
            return None
        future = held[1]
        if _failed(future):
            return None  # storage is asked again, and says what is wrong
        return future


def _failed(future: Future[Restored]) -> bool:
    """Whether ``future`` ended without a snapshot: its read failed, or it was cancelled (a
    runner that closes before its restore came cancels the fetch it was lent)."""
    return future.done() and (future.cancelled() or future.exception() is not None)
