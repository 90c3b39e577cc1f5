"""A worker that starts over while its member's allocations lag (computed in the background)
reaches the replica a classic member has at the same position: the member hands it the settled
replica and the entries since, never its own replica, which misses the allocations owed."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from multiprocessing import Pipe

from hypothesis import given, settings

from peer.cluster.group import GroupConfig
from peer.cluster.member import MemberIncarnation, Workers
from peer.cluster.worker import Worker, WorkerSpec
from peer.cluster.worker_outbox import WorkerOutbox
from peer.log.entry import Entry
from peer.log.pipeline import Pipeline
from peer.log.replica import Replica
from peer.log.stores.memory import MemoryLog
from tests.support import wait_for
from tests.unit.log.random_logs import random_logs, replay

SPEC = WorkerSpec(slot=0, tenancy="t", checkpoints="/nonexistent")


@dataclass(frozen=True)
class Lagging:
    """An applier whose owed allocations never land: what a member's looks like meanwhile."""

    complete: Replica
    since: tuple[Entry, ...]


def sent_all(outbox: WorkerOutbox) -> bool:
    with outbox.ready:
        return not outbox.waiting and not outbox.in_flight


@settings(max_examples=60, deadline=None)
@given(random_logs())
def test_a_worker_started_over_while_allocations_lag_has_the_classic_replica(log):
    machine, handed = Pipeline.start(Replica()), []
    for entry in log:
        machine, progress = machine.offer(entry)
        handed += progress.transitions
    if not handed:
        return
    workers = Workers(1, SPEC, MemoryLog().session())
    member_end, worker_end = Pipe()
    outbox = WorkerOutbox(member_end, "worker 0", timeout=60.0)
    workers.slots[0].conn, workers.slots[0].site = member_end, "w0:1"
    workers.slots[0].outbox = outbox
    member = MemberIncarnation(
        MemoryLog().session(), GroupConfig(vpeers=1), threading.Event(), workers=workers
    )
    member.replica = handed[-1].new
    member.applier = Lagging(machine.complete, tuple(machine.since))
    member._feed()
    w = Worker(SPEC, None, None, None, None)

    def received_all() -> bool:
        while worker_end.poll():
            w.inbox.put(worker_end.recv())
        return sent_all(outbox) and not worker_end.poll()

    wait_for(received_all, timeout=30, what="the member's messages", interval=0.001)
    outbox.close()
    w._take()
    classic = replay(log)[handed[-1].entry.position]
    assert w.replica == classic
    assert w.replica.key_versions == classic.key_versions
    assert w.member == member.id
