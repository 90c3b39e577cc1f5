"""An output of a job that recovers locally takes its barriers unaligned: the first copy of a
barrier opens the epoch and snapshots, every sender goes on, what the late senders send before
their copy is the epoch's channel state, and a restore takes that again first. Together the
snapshot and its channel state hold every batch sent before the barrier, once."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from peer.job.spec import Job, Task
from peer.messaging.messages import Barrier, Batch, Recover, RestorePoint
from peer.plugins import memory
from peer.runtime.checkpoints import CheckpointStorage
from peer.runtime.inbox import BarrierSkipped
from peer.runtime.placement import place
from peer.runtime.routing import Router, routes
from peer.runtime.task import TaskContext, TaskRunner
from peer.runtime.unaligned import UnalignedInbox
from tests.support import reported, wait_for


def rows(*ns: int) -> Batch:
    return Batch([{"n": n} for n in ns])


def test_the_first_copy_opens_the_epoch_and_its_sender_goes_on():
    inbox = UnalignedInbox(frozenset({1, 2}))
    inbox.put(1, rows(1))
    inbox.put(1, Barrier(1))
    inbox.put(1, rows(2))
    inbox.put(2, rows(3))
    assert inbox.opened() is None, "nothing has reached a barrier yet"
    assert sorted(r["n"] for r in inbox.take(10)) == [1, 3]
    assert inbox.opened() == Barrier(1)
    assert inbox.sealed() is None, "sender 2's copy has not come"
    inbox.put(2, rows(4))
    assert sorted(r["n"] for r in inbox.take(10)) == [2, 4]
    assert inbox.sealed() is None
    inbox.put(2, Barrier(1))
    assert inbox.sealed() == [[{"n": 4}]], "what sender 2 sent after the epoch opened"
    assert inbox.opened() is None, "the epoch is closed"
    assert inbox.sealed() is None


def test_a_late_sender_at_another_epochs_barrier_skipped_the_open_one():
    """Its batches belong to no epoch the output can close: the runner is told (and rolls the
    job back) rather than waiting for a barrier that will not come."""
    inbox = UnalignedInbox(frozenset({1, 2}))
    inbox.put(1, Barrier(1))
    assert inbox.opened() == Barrier(1)
    inbox.put(2, rows(5))
    inbox.put(2, Barrier(2))
    assert [r["n"] for r in inbox.take(10)] == [5]
    with pytest.raises(BarrierSkipped, match="epoch 2, not of the open epoch 1"):
        inbox.sealed()


def test_a_sender_at_the_next_barrier_waits_until_the_open_epoch_closes():
    inbox = UnalignedInbox(frozenset({1, 2}))
    for item in (Barrier(1), Barrier(2), rows(5)):
        inbox.put(1, item)
    assert inbox.opened() == Barrier(1)
    assert inbox.take(10) == [], "sender 1 is held at barrier 2"
    assert inbox.opened() is None
    inbox.put(2, Barrier(1))
    assert inbox.sealed() == []
    assert inbox.opened() == Barrier(2)


def test_a_late_sender_that_moved_to_another_peer_stays_late():
    inbox = UnalignedInbox(frozenset({1, 2}))
    inbox.put(1, Barrier(1))
    assert inbox.opened() == Barrier(1)
    inbox.rekey(2, 7)
    inbox.put(7, rows(9))
    assert inbox.take(10) == [{"n": 9}]
    inbox.put(7, Barrier(1))
    assert inbox.sealed() == [[{"n": 9}]]


def test_an_unaligned_inbox_aligns_nothing():
    inbox = UnalignedInbox(frozenset({1}))
    inbox.put(1, Barrier(1))
    assert inbox.aligned() is None
    with pytest.raises(RuntimeError, match="no aligned barrier"):
        inbox.release()


@st.composite
def deliveries(draw: st.DrawFn) -> tuple[dict[int, list[Any]], list[int]]:
    """Per sender, batches before and after its barrier of epoch 1; an interleaving of the
    senders' items and of the receiver's steps (0)."""
    senders = draw(st.integers(1, 4))
    items: dict[int, list[Any]] = {}
    counter = iter(range(10**6))
    for s in range(1, senders + 1):
        before = [rows(next(counter)) for _ in range(draw(st.integers(0, 4)))]
        after = [rows(next(counter)) for _ in range(draw(st.integers(0, 3)))]
        items[s] = [*before, Barrier(1), *after]
    order = [s for s, queue in items.items() for _ in queue]
    order += [0] * draw(st.integers(0, 2 * len(order)))
    return items, draw(st.permutations(order))


@settings(max_examples=200, deadline=None)
@given(deliveries(), st.integers(1, 3))
def test_the_snapshot_and_its_channel_state_hold_everything_before_the_barriers_once(
    case: tuple[dict[int, list[Any]], list[int]], limit: int
):
    items, order = case
    inbox = UnalignedInbox(frozenset(items))
    cursor = dict.fromkeys(items, 0)
    written: list[int] = []
    snapshot: list[int] | None = None
    channel: list[int] | None = None

    def step() -> None:
        nonlocal snapshot, channel
        sealed = inbox.sealed()
        if sealed is not None:
            channel = [r["n"] for batch in sealed for r in batch]
        if inbox.opened() is not None:
            snapshot = list(written)
        written.extend(r["n"] for r in inbox.take(limit))

    for who in order:
        if who == 0:
            step()
        else:
            inbox.put(who, items[who][cursor[who]])
            cursor[who] += 1
    for _ in range(len(order) + 2):
        step()
    before = [b.batch[0]["n"] for q in items.values() for b in q[: q.index(Barrier(1))]]
    assert snapshot is not None
    assert channel is not None
    assert sorted(snapshot + channel) == sorted(before)
    assert sorted(written) == sorted(b.batch[0]["n"] for q in items.values()
                                     for b in q if isinstance(b, Batch))  # fmt: skip


JOB = Job(
    workflow=(("in", "f"), ("f", "out")),
    catalog=(
        Task("in", "input", plugin="peer.plugins.memory:input", params={"count": 0}),
        Task("f", "function", n_peers=2),
        Task(
            "out", "output", plugin="peer.plugins.memory:output", params={"collection": "unaligned"}
        ),
    ),
    local_recovery=True,
    id="j",
)
ALLOCATION = {"in": ("i0",), "f": ("f0", "f1"), "out": ("o0",)}
SHORT_IDS = {"j": 100, "i0": 1, "f0": 2, "f1": 6, "o0": 3}


@pytest.fixture
def storage():
    store = CheckpointStorage("memory://unaligned", uuid.uuid4().hex)
    yield store
    store.close()


def output(storage: Any, version: int, reports: list[Any]) -> TaskRunner:
    placement = place(JOB, version, ALLOCATION, SHORT_IDS, {})
    return TaskRunner(
        TaskContext(
            placement=placement, peer="o0", router=Router(routes(placement, "out")),
            send=lambda to, m: None, report=lambda m: reports.append(reported(m)),
            grant=lambda source, n, rows: None, congested=lambda: False, complete=lambda: None,
            storage=storage,
            fetch=lambda job_id, epoch, slot, groups: storage.restore(
                job_id, epoch, "out", slot, groups
            ),
        )
    )  # fmt: skip


def written() -> list[int]:
    return [r["n"] for r in memory.collected("unaligned").get("out", [])]


def run(r: TaskRunner, done: Any) -> None:
    def stepped() -> bool:
        r.step()
        return done()

    wait_for(stepped, 10, "the output to get there", interval=0)


def test_an_output_writes_past_a_late_barrier_and_a_restore_takes_its_channel_again(storage):
    memory.discard("unaligned")
    reports: list[Any] = []
    first = output(storage, 7, reports)
    first.recover_from(Recover(None))
    run(first, lambda: first.phase.value == "run")
    first.deliver(2, rows(1))
    first.deliver(2, Barrier(1))
    first.deliver(2, rows(2))
    first.deliver(6, rows(3))
    run(first, lambda: sorted(written()) == [1, 2, 3])
    assert reports == [], "f1's copy of the barrier has not come: the snapshot waits"
    first.deliver(6, rows(4))
    first.deliver(6, Barrier(1))
    run(first, lambda: reports == [("ack", 1)])
    assert sorted(written()) == [1, 2, 3, 4]
    first.close()
    # the job rolls back to epoch 1: f0 sends 2 again, f1 (past 3 and 4) sends nothing again
    again = output(storage, 8, [])
    again.recover_from(Recover(RestorePoint("j", 7, 1, {"out": 1})))
    run(again, lambda: sorted(written()) == [1, 3, 4])
    again.deliver(2, rows(2))
    run(again, lambda: sorted(written()) == [1, 2, 3, 4])
