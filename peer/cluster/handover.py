"""A leaving member's hand-over: it keeps its work until every checkpointed job it takes part in
has committed the hand-over's pause, the epoch whose inputs read nothing after its barrier
(peer.runtime.coordinator, which sends it once the leave is in the log). The job then stands
exactly at that commit, and the new allocation restores from it without doing anything again:
the job moves, it does not roll back.

Jobs that do not checkpoint, and jobs that end meanwhile, are not waited for; a job whose
commit record cannot be read is not either (its peers move as they would on a down). A deadline
bounds the whole wait: a job whose coordinator cannot commit must not keep the member forever.

A member that is stopped (SIGTERM, Ctrl-C) leaves the same way, and the whole leave must end
before its supervisor kills it: ``StopDeadlines`` shares the stop's timeout among the
hand-over, the exit and removal, and a last resort of leaving at once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from peer.log.replica import Replica
from peer.log.store import LogStore, StoreError
from peer.runtime.checkpoints import CheckpointError, Commits
from peer.values.epoch import Epoch

log = logging.getLogger(__name__)

READ_EVERY = 0.25
"""Seconds between reads of the awaited jobs' commit records."""


@dataclass(frozen=True)
class StopDeadlines:
    """The deadlines of a stopped member's leave, all within its timeout of the signal. The
    hand-over may take the first half (a job's current epoch commits within a barrier period
    and a checkpoint, seconds); member-exit and the leader's removal, which wait for a round or
    two of gossip, get until three quarters; a member not removed by then leaves at once (its
    own group-leave-cluster, as a downed member's: what is still its work moves from its jobs'
    last commits), and the last quarter is for reading that back. At the end it closes
    whatever it has read."""

    hand_over: float
    leave_at_once: float
    close: float

    @classmethod
    def after(cls, now: float, timeout: float) -> StopDeadlines:
        return cls(now + timeout / 2, now + timeout * 3 / 4, now + timeout)


class HandOver:
    def __init__(self, store: LogStore, awaited: dict[str, Epoch | None], deadline: float) -> None:
        self.store, self.awaited, self.deadline = store, awaited, deadline
        self.next_read = 0.0

    @classmethod
    def begin(
        cls, store: LogStore, replica: Replica, peers: Iterable[str], deadline: float
    ) -> HandOver:
        """Wait for the jobs ``peers`` work on, from the epochs they have committed now."""
        mine = set(peers)
        jobs = sorted(
            job
            for job, tasks in replica.allocations.items()
            if replica.jobs[job].barrier_period is not None
            and any(mine & set(ps) for ps in tasks.values())
        )
        awaited = {}
        for job in jobs:
            try:
                awaited[job] = _committed(store, job)
            except (StoreError, CheckpointError) as e:
                _unreadable(job, e)
        return cls(store, awaited, deadline)

    def done(self, replica: Replica, now: float) -> bool:
        """Whether every awaited job has committed a newer epoch at a hand-over's pause (where
        it stands still: peer.runtime.coordinator), ended, or run out of time."""
        if now >= self.deadline:
            if self.awaited:
                log.warning("jobs %s did not commit an epoch in time; handing over anyway",
                            ", ".join(sorted(self.awaited)))  # fmt: skip
            return True
        if now < self.next_read:
            return False
        self.next_read = now + READ_EVERY
        for job, before in sorted(self.awaited.items()):
            if job in replica.jobs and not self._committed_since(job, before):
                continue
            del self.awaited[job]
        return not self.awaited

    def _committed_since(self, job: str, before: Epoch | None) -> bool:
        try:
            record, _ = Commits(self.store, job).read()
        except (StoreError, CheckpointError) as e:
            _unreadable(job, e)
            return True
        now = None if record is None else record.committed
        newer = now is not None and (before is None or now > before)
        return newer and record is not None and record.quiesced


def _committed(store: LogStore, job: str) -> Epoch | None:
    """The job's committed epoch, None before its first."""
    record, _ = Commits(store, job).read()
    return None if record is None else record.committed


def _unreadable(job: str, error: Exception) -> None:
    log.warning("job %s: its commit record cannot be read (%s); not waiting for it", job, error)
