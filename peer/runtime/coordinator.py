"""A job's coordinator for one allocation: it decides where the job recovers from, paces the
epochs and commits them.

It runs in the group of the job's coordinator peer (the placement's: the first peer of the
job's first input task, a pure function of the replica, so every group agrees on it). Its life,
one non-blocking ``step`` at a time, with every ZooKeeper call in the group's worker pool:

1. claim the job's commit record for this allocation version. From then on a coordinator of an
   older allocation can commit nothing: its compare-and-set fails. A claim that finds a newer
   owner means this coordinator is the stale one, and it stays silent.
2. tell every peer of the job where to recover from (RECOVER): the committed epoch, or the last
   one of the job named in ``resume_from`` for a new job, or nothing.
3. every barrier period, with no epoch in flight, send BARRIER to every input peer. When every
   peer of the job has ACKed the epoch (its snapshot is stored), commit it and broadcast
   COMMITTED, then let storage drop the snapshots no restore reads any more: those before the
   previous commit's chains (peer.runtime.checkpoints), and no savepoint's.
4. once every output peer is DRAINED (the job's bounded inputs have ended and every segment has
   reached the outputs) the next barrier is the final one; its commit lets the outputs publish
   and complete the job.

A hand-over moves the job without rolling it back. While a member that runs some of the job's
peers is leaving (``handing_over``, set by the group from the replica), the next barrier is a
pause: the inputs read nothing after it, so once its epoch commits the job stands exactly at
that commit, and the coordinator sends no further barrier. The member exits on that commit
(peer.cluster.handover); the new allocation's peers restore from it and redo nothing, which the
record says (``quiesced``), and their restores count as ``handover``, not ``global``. An
abandoned pause is sent again, as any barrier is. Should the member leave without the job's
allocation changing (standbys took its seats over), the next barrier, at once, is an ordinary
one, and the inputs read again after it.

Growth pauses the job the same way. A job the allocation holds back at its size though the
schedulers would give it more peers (``held_back``: peer.log.allocation) is paused; once it
stands still at the pause's commit, the coordinator writes grow-job (``grow``), and the new
allocation that grows the job restores from that commit, a ``handover`` too. Should the job no
longer be held back without growing (the peers it would have had went away), it goes on as
after a leave that changed nothing.

A job stopped with a savepoint (peer.api.stop) has its commit record fenced by the very commit
that takes the savepoint (peer.runtime.checkpoints.CommitRecord.stop): the coordinator's next
commit is refused, as a stale one's is, and it commits nothing more.

No job waits for ever on an epoch. One that has not committed ``Job.epoch_timeout`` seconds
after its barrier is abandoned: its acks no longer count, the peers that did not acknowledge it
are named in the log, and the next epoch starts at once. Barriers travel in line, so every peer
still passes the abandoned one first, and the next commit covers all it staged (a sink
publishes every epoch sealed up to the commit). More abandoned in a row than the job's
``tolerable_abandoned_epochs`` means the epochs no longer complete at all (a barrier lost with
a peer's state, a peer stuck): the coordinator rolls the job back to its last commit
(rollback-job), saying why, as Flink fails a job over after its tolerable checkpoint failures.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from peer.job.spec import Job
from peer.log.store import StoreError
from peer.messaging.messages import Barrier, Committed, Message, Recover, RestorePoint
from peer.metrics import ABANDONED_EPOCHS, CHECKPOINT_SECONDS
from peer.runtime.checkpoints import CheckpointError, CheckpointStorage, CommitRecord, Commits
from peer.runtime.placement import Placement
from peer.values.epoch import Epoch

log = logging.getLogger(__name__)

Send = Callable[[str, Message], None]

RETRY = 1.0
"""Seconds before a claim or commit that the store could not serve (ZooKeeper away for longer
than its retries) is tried again: checkpoints wait for the store, the job goes on."""

FIRST_EPOCH = 0.25
"""Seconds before the first barrier of an allocation, at most: after a recovery the output of
the replayed segments is published this soon, not a whole barrier period later."""


class CoordinatorState(Enum):
    CLAIM = "claim"
    """To claim the commit record."""
    CLAIMING = "claiming"
    """The claim is in the pool."""
    RUNNING = "running"
    """Pacing epochs: sending barriers, gathering acks."""
    COMMITTING = "committing"
    """A commit is in the pool."""
    ROLLING_BACK = "rolling back"
    """Epochs stopped committing and the job's rollback is written: waiting for its new
    allocation version, which replaces this coordinator."""
    STALE = "stale"
    """A newer allocation owns the job's checkpoints: nothing more to do."""


@dataclass
class Coordinator:
    placement: Placement
    commits: Commits
    storage: CheckpointStorage
    pool: Executor
    send: Send
    rollback: Callable[[str], None] = lambda reason: None
    """Writes the job's rollback-job entry for this allocation, with the reason."""
    grow: Callable[[], None] = lambda: None
    """Writes the job's grow-job entry for this allocation."""
    state: CoordinatorState = CoordinatorState.CLAIM
    epoch: int = 0
    settled: int = 0
    """The last epoch of this allocation that was committed or abandoned: the one after it, up
    to ``epoch``, is in flight."""
    abandoned: int = 0
    """Epochs abandoned in a row since the last commit."""
    final: int | None = None
    handing_over: bool = False
    """A member running some of the job's peers is leaving: the next barrier is a pause."""
    held_back: bool = False
    """The allocation holds the job back from growing: the next barrier is a pause."""
    paused: int | None = None
    """The epoch of the pause sent, after which no barrier is sent."""
    grown: int | None = None
    """The committed pause after which grow-job was written."""
    acks: set[str] = field(default_factory=set)
    since: int = 0
    """Where the chains of the epoch in flight's snapshots start: the least its acks said."""
    drained: set[str] = field(default_factory=set)
    pending: Future[Any] | None = None
    next_barrier: float = 0.0
    barrier_sent: float = 0.0
    committed: Epoch | None = None
    retry_at: float = 0.0
    restore_point: RestorePoint | None = None
    """Where a peer restores from now: the last commit, or what the claim found (None: from
    the beginning)."""
    joining: frozenset[str] = frozenset()
    """Peers that took a seat over since the last message to all: told RECOVER once running."""
    rollback_reason: str = ""
    """Why the job rolls back, once it does: written again with each retry of the entry."""
    last_commit: float = field(default_factory=time.time)
    """Wall-clock time of the last commit, or of the coordinator's start: what the metrics
    measure "time since the last commit" from."""
    job: Job = field(init=False)
    job_id: str = field(init=False)
    version: int = field(init=False)
    barrier_period: float = field(init=False)
    """The job's, which is set: a job without checkpoints has no coordinator."""
    members: frozenset[str] = field(init=False)
    inputs: tuple[str, ...] = field(init=False)
    outputs: frozenset[str] = field(init=False)
    slots: dict[str, int] = field(init=False)
    groups: dict[str, int] = field(init=False)
    _steps: dict[CoordinatorState, Callable[[float], bool]] = field(init=False, repr=False)
    _results: dict[CoordinatorState, Callable[[Any, float], bool]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        """The placement is fixed for a coordinator's life, so who it hears from is too."""
        placement = self.placement
        self.job, self.job_id, self.version = placement.job, placement.job_id, placement.version
        period = self.job.barrier_period
        if period is None:
            raise ValueError(f"job {self.job_id!r} takes no checkpoints: it has no coordinator")
        self.barrier_period = period
        self.members = frozenset(placement.members)
        self.inputs = placement.peers_of_kind("input")
        self.outputs = frozenset(placement.peers_of_kind("output"))
        self.slots = placement.task_slots()
        self.groups = placement.task_groups()
        self._steps = {
            CoordinatorState.CLAIM: self._claim,
            CoordinatorState.RUNNING: self._running,
            CoordinatorState.ROLLING_BACK: self._roll_back,
            CoordinatorState.STALE: self._stale,
        }
        # claiming and committing wait on a call in the pool, whose result moves them on
        self._results = {
            CoordinatorState.CLAIMING: self._claimed,
            CoordinatorState.COMMITTING: self._commit_done,
        }

    def rewire(self, placement: Placement) -> None:
        """A takeover under the same allocation: the failed peers' acks no longer count (their
        replacements snapshot those epochs again as they replay), and each replacement is told
        where to restore from, once no claim or commit is in flight."""
        before = self.members
        self.placement = placement
        self.__post_init__()
        gone = before - self.members
        self.acks -= gone
        self.drained -= gone
        self.joining = (self.joining - gone) | (self.members - before)

    # -- messages from the job's peers ----------------------------------------------------------

    def on_ack(self, peer: str, epoch: int, since: int = 0) -> None:
        """``peer`` stored its snapshot of ``epoch``, whose chain starts at epoch ``since`` (0:
        the snapshot is whole)."""
        if epoch == self.epoch:
            self.acks.add(peer)
            self.since = min(self.since, since or epoch)

    def on_drained(self, peer: str) -> None:
        self.drained.add(peer)

    # -- the life -------------------------------------------------------------------------------

    def step(self, now: float) -> bool:
        if self.pending is not None:
            if not self.pending.done():
                return False
            pending, self.pending = self.pending, None
            try:
                result = pending.result()
            except StoreError as e:
                return self._store_failed(e, now)
            return self._results[self.state](result, now)
        if now < self.retry_at:
            return False
        return self._steps[self.state](now)

    def _store_failed(self, error: StoreError, now: float) -> bool:
        """Claims and commits are compare-and-sets that recognise their own earlier write, so
        trying one again is safe."""
        log.warning("job %s: %s; trying again in %g s", self.job_id, error, RETRY)
        self.state = (
            CoordinatorState.CLAIM
            if self.state is CoordinatorState.CLAIMING
            else CoordinatorState.RUNNING
        )
        self.retry_at = now + RETRY
        return True

    def _claim(self, now: float) -> bool:
        self.pending = self.pool.submit(self._claim_and_find_source)
        self.state = CoordinatorState.CLAIMING
        return True

    def _claim_and_find_source(self) -> tuple[CommitRecord | None, RestorePoint | None]:
        """The claimed record, and what RECOVER says: where every peer restores from (the
        job's own last commit, else what ``resume_from`` names, else nowhere)."""
        claimed = self.commits.claim(self.version)
        if claimed is None:
            return None, None
        if claimed.committed is not None:
            point = _point(self.job_id, claimed.committed, claimed.slots, claimed.groups,
                           claimed.scope)  # fmt: skip
            return claimed, point
        source = self.job.resume_source()
        return claimed, None if source is None else self._resumed(*source)

    def _resumed(self, source_job: str, savepoint: str | None) -> RestorePoint | None:
        """Where a new job that ``resume_from`` another restores from: its last commit (nowhere
        if it has none) or a savepoint (which must exist)."""
        record = Commits(self.commits.store, source_job).read()[0]
        if savepoint is None:
            if record is None or record.committed is None:
                return None
            return _point(source_job, record.committed, record.slots, record.groups)
        kept = record.savepoints.get(savepoint) if record else None
        if kept is None:
            raise CheckpointError(
                f"job {self.job_id!r}: resume_from names savepoint {savepoint!r} of job "
                f"{source_job!r}, which does not exist"
            )
        return _point(source_job, kept.epoch, kept.slots, kept.groups)

    def _claimed(self, result: Any, now: float) -> bool:
        claimed, point = result
        if claimed is None:
            log.info("job %s: a newer allocation owns its checkpoints", self.job_id)
            self.state = CoordinatorState.STALE
            return True
        self.committed = claimed.committed
        self.epoch = self.settled = self.committed_number()
        self.restore_point, self.joining = point, frozenset()
        for peer in self.placement.members:
            self.send(peer, Recover(point))
        self.state = CoordinatorState.RUNNING
        self.next_barrier = now + min(self.barrier_period, FIRST_EPOCH)
        return True

    def _stale(self, now: float) -> bool:
        return False

    def _running(self, now: float) -> bool:
        if self.joining:
            for peer in sorted(self.joining):
                self.send(peer, Recover(self.restore_point))
            self.joining = frozenset()
            return True
        if self.epoch > self.settled:
            return self._in_flight(now)
        if self.final is not None:
            return False
        pausing = self.handing_over or self.held_back
        if self.paused is not None and pausing:
            return self._grow_at_pause()
        if self.paused is not None:
            # The member left without this allocation changing (standbys took its seats over):
            # the job goes on at once, the next barrier telling the inputs to read again.
            self.paused, self.next_barrier = None, now
        drained = self.drained >= self.outputs
        if now < self.next_barrier and not (drained or pausing):
            return False
        self.epoch += 1
        self.acks, self.since = set(), self.epoch
        if drained:
            self.final = self.epoch
        elif pausing:
            self.paused = self.epoch
        self.next_barrier = now + self.barrier_period
        self.barrier_sent = now
        barrier = Barrier(self.epoch, self.final is not None, self.paused is not None)
        for peer in self.inputs:
            self.send(peer, barrier)
        return True

    def _grow_at_pause(self) -> bool:
        """A job held back and standing still at its pause's commit asks, once, to grow."""
        if not self.held_back or self.grown == self.paused:
            return False
        self.grown = self.paused
        log.info("job %s: standing still at epoch %d of allocation %d; growing it",
                 self.job_id, self.paused, self.version)  # fmt: skip
        self.grow()
        return True

    def _in_flight(self, now: float) -> bool:
        """The epoch in flight: committed once every peer has acknowledged it, abandoned once
        it is older than the job's timeout."""
        if self.acks >= self.members:
            epoch, quiesced = Epoch(self.version, self.epoch), self.paused == self.epoch
            self.pending = self.pool.submit(
                self.commits.commit, self.version, epoch, self.slots, quiesced=quiesced,
                groups=self.groups, since=self.since,
            )  # fmt: skip
            self.state = CoordinatorState.COMMITTING
            return True
        if now - self.barrier_sent < self.job.epoch_timeout:
            return False
        self._abandon(now)
        return True

    def _abandon(self, now: float) -> None:
        """Give the epoch in flight up, and start the next one at once, or roll the job back
        when that is one too many in a row."""
        self.settled, self.abandoned = self.epoch, self.abandoned + 1
        if self.final == self.epoch:
            self.final = None  # the next barrier is the final one again
        if self.paused == self.epoch:
            self.paused = None  # and the next is a pause again
        ABANDONED_EPOCHS.labels(self.job_id).inc()
        late = f"not acknowledged within {self.job.epoch_timeout:g} s by {self.unacknowledged()}"
        log.warning("job %s: epoch %d of allocation %d abandoned: %s",
                    self.job_id, self.epoch, self.version, late)  # fmt: skip
        if self.abandoned <= self.job.tolerable_abandoned_epochs:
            self.next_barrier = now
            return
        reason = (f"job {self.job_id!r}: {self.abandoned} epochs in a row abandoned, the last "
                  f"(epoch {self.epoch} of allocation {self.version}) {late}")  # fmt: skip
        log.warning("%s; rolling the job back to its last commit", reason)
        self.rollback_reason = reason
        self.state = CoordinatorState.ROLLING_BACK
        self._roll_back(now)

    def _roll_back(self, now: float) -> bool:
        """Write the rollback, and again each timeout until the new version replaces this
        coordinator: the entry names this version, so a repeat changes nothing."""
        self.rollback(self.rollback_reason)
        self.retry_at = now + self.job.epoch_timeout
        return True

    def unacknowledged(self) -> str:
        """The tasks whose peers have not acknowledged the epoch in flight, with those peers:
        where an operator looks first."""
        missing: dict[str, list[str]] = {}
        for peer in sorted(self.members - self.acks):
            missing.setdefault(self.placement.tasks[peer], []).append(peer)
        return ", ".join(f"task {task!r} (peers {', '.join(peers)})"
                         for task, peers in sorted(missing.items()))  # fmt: skip

    def committed_number(self) -> int:
        committed = self.committed
        return committed.number if committed and committed.version == self.version else 0

    def _commit_done(self, record: CommitRecord | None, now: float) -> bool:
        if record is None:
            log.info("job %s: a newer allocation, or a stop, claimed its checkpoints", self.job_id)
            self.state = CoordinatorState.STALE
            return True
        previous, self.committed = self.committed, Epoch(self.version, self.epoch)
        self.settled, self.abandoned = self.epoch, 0
        self.last_commit = time.time()
        CHECKPOINT_SECONDS.labels(self.job_id).observe(now - self.barrier_sent)
        log.info(
            "job %s: epoch %d of allocation %d committed; its checkpoint took %.3f s",
            self.job_id, self.epoch, self.version, now - self.barrier_sent,
        )  # fmt: skip
        self.restore_point = _point(self.job_id, Epoch(self.version, self.epoch), self.slots,
                                    self.groups, record.scope)  # fmt: skip
        for peer in self._told_of_commits():
            self.send(peer, Committed(self.epoch))
        if previous is not None:
            self.storage.collect_later(self.job_id, record.retains)
        self.state = CoordinatorState.RUNNING
        return True

    def _told_of_commits(self) -> list[str]:
        """The job's peers and its standbys, which fetch each committed snapshot."""
        standbys = set(self.placement.standbys.values()) - set(self.members)
        return [*self.placement.members, *sorted(standbys)]

    def close(self) -> None:
        if self.pending is not None:
            self.pending.cancel()


def _point(
    job: str,
    epoch: Epoch,
    slots: Mapping[str, int],
    groups: Mapping[str, int],
    scope: str = "global",
) -> RestorePoint:
    return RestorePoint(job, epoch.version, epoch.number, dict(slots), scope, dict(groups))
