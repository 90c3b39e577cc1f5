"""A leaving member's hand-over waits for each checkpointed job it works on to commit an epoch
newer than the one committed when the leave began, and for nothing else."""

from __future__ import annotations

from pyrsistent import pmap

from peer.cluster.handover import HandOver
from peer.job.spec import Job, Task
from peer.log.replica import Replica
from peer.log.stores.memory import MemoryLog
from peer.runtime.checkpoints import Commits
from peer.values.epoch import Epoch


def job(job_id: str, barrier_period: float | None) -> Job:
    tasks = (Task("in", "input", plugin="x:y"), Task("out", "output", plugin="x:z"))
    return Job(job_id, (("in", "out"),), tasks, barrier_period=barrier_period)


REPLICA = Replica(
    jobs=pmap({"j": job("j", 0.5), "plain": job("plain", None), "other": job("other", 0.5)}),
    allocations=pmap({
        "j": pmap({"in": ("a1",), "out": ("b1",)}),
        "plain": pmap({"in": ("a2",), "out": ("b2",)}),
        "other": pmap({"in": ("b3",), "out": ("b4",)}),
    }),
)  # fmt: skip


def test_it_waits_for_a_newer_commit_at_a_pause_of_its_checkpointed_jobs_only():
    """A commit of an epoch whose barrier was sent before the leave came is not where the job
    stands still: the hand-over waits for the pause's."""
    store = MemoryLog().session()
    commits = Commits(store, "j")
    commits.claim(3)
    commits.commit(3, Epoch(3, 4), {"in": 1, "out": 1})
    handing = HandOver.begin(store, REPLICA, ["a1", "a2"], deadline=100.0)
    assert handing.awaited == {"j": Epoch(3, 4)}
    assert not handing.done(REPLICA, 1.0)
    commits.commit(3, Epoch(3, 5), {"in": 1, "out": 1})
    assert not handing.done(REPLICA, 2.0), "epoch 5 was no pause"
    commits.commit(3, Epoch(3, 6), {"in": 1, "out": 1}, quiesced=True)
    assert not handing.done(REPLICA, 2.1), "reads are spaced out"
    assert handing.done(REPLICA, 3.0)


def test_a_job_that_ends_or_the_deadline_ends_the_wait():
    store = MemoryLog().session()
    handing = HandOver.begin(store, REPLICA, ["a1"], deadline=100.0)
    assert handing.awaited == {"j": None}
    assert not handing.done(REPLICA, 1.0)
    assert handing.done(REPLICA.evolve(jobs=REPLICA.jobs.discard("j")), 2.0)
    late = HandOver.begin(store, REPLICA, ["a1"], deadline=100.0)
    assert late.done(REPLICA, 100.0)
