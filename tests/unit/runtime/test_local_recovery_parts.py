"""The parts of local recovery around the replay: a standby holds its seat's latest committed
snapshot, fetched as each commit is announced, and hands it to the runner it becomes; an
upstream whose in-flight log overflowed, or a replay that made fewer messages than a downstream
had, rolls the job back instead of failing it."""

from __future__ import annotations

import uuid
from concurrent.futures import Future
from typing import Any

import pytest

from peer.job.spec import Job, Task
from peer.messaging.messages import Batch, Recalled, Recover, ReplayFrom
from peer.runtime.causal import CausalTask, LocalRecoveryError
from peer.runtime.checkpoints import CheckpointStorage
from peer.runtime.placement import place
from peer.runtime.routing import Router, routes
from peer.runtime.snapshot import Restored, TaskSnapshot
from peer.runtime.standby import Standbys, Watch
from peer.runtime.task import TaskContext, TaskRunner
from peer.values.epoch import Epoch
from tests.support import wait_for

JOB = Job(
    workflow=(("in", "f"), ("f", "out")),
    catalog=(
        Task("in", "input", plugin="peer.plugins.memory:input"),
        Task("f", "function", standby=True),
        Task("out", "output", plugin="peer.plugins.null:output"),
    ),
    local_recovery=True,
    in_flight_budget=1 << 20,
    id="j",
)
SHORT_IDS = {"j": 100, "i0": 1, "f0": 2, "o0": 3, "o1": 4, "s0": 5}


@pytest.fixture
def storage():
    store = CheckpointStorage("memory://local-recovery-parts", uuid.uuid4().hex)
    yield store
    store.close()


def test_a_standby_holds_the_latest_committed_snapshot_of_its_seat(storage):
    placement = place(JOB, 7, {"in": ("i0",), "f": ("f0",), "out": ("o0",)}, SHORT_IDS, {},
                      standbys={"f0": "s0"})  # fmt: skip
    standbys = Standbys(storage)
    standbys.sync({"j": placement}, ["s0"])
    for number in (1, 2):
        snapshot = TaskSnapshot(number, None, None, False, chain=(1,) if number > 1 else ())
        storage.put("j", Epoch(7, number), "f", 0, snapshot.to_bytes({3: bytes([number])})).result()
        standbys.committed("s0", Epoch(7, number))
    held = standbys.fetch("j", Epoch(7, 2), "f", 0)
    assert held is not None
    assert held.result().snapshot.plugin == 2
    assert held.result().layers == [{3: b"\x01"}, {3: b"\x02"}], "with its chain"
    assert standbys.fetch("j", Epoch(7, 1), "f", 0) is None, "only the latest is held"
    standbys.committed("o0", Epoch(7, 3))  # not a standby here: nothing to fetch
    assert standbys.fetch("j", Epoch(7, 3), "f", 0) is None


def test_a_standby_whose_held_fetch_was_cancelled_asks_storage_again(storage):
    """A runner that closes before the restore it was lent came cancels it: the standby then
    neither lends it nor builds the next epoch's restore on it."""
    placement = place(JOB, 7, {"in": ("i0",), "f": ("f0",), "out": ("o0",)}, SHORT_IDS, {},
                      standbys={"f0": "s0"})  # fmt: skip
    standbys = Standbys(storage)
    standbys.sync({"j": placement}, ["s0"])
    for number in (1, 2):
        snapshot = TaskSnapshot(number, None, None, False, chain=(1,) if number > 1 else ())
        storage.put("j", Epoch(7, number), "f", 0, snapshot.to_bytes({3: bytes([number])})).result()
    cancelled: Future[Restored] = Future()
    cancelled.cancel()
    standbys.held[Watch("j", "f", 0)] = (Epoch(7, 1), cancelled)
    assert standbys.fetch("j", Epoch(7, 1), "f", 0) is None
    standbys.committed("s0", Epoch(7, 2))
    held = standbys.fetch("j", Epoch(7, 2), "f", 0)
    assert held is not None
    assert held.result().layers == [{3: b"\x01"}, {3: b"\x02"}]


def test_a_standby_that_took_its_seat_over_keeps_what_it_holds_until_it_restores(storage):
    before = place(JOB, 7, {"in": ("i0",), "f": ("f0",), "out": ("o0",)}, SHORT_IDS, {},
                   standbys={"f0": "s0"})  # fmt: skip
    standbys = Standbys(storage)
    standbys.sync({"j": before}, ["s0"])
    storage.put(
        "j", Epoch(7, 1), "f", 0, TaskSnapshot("state", None, None, False).to_bytes()
    ).result()
    standbys.committed("s0", Epoch(7, 1))
    after = place(JOB, 7, {"in": ("i0",), "f": ("s0",), "out": ("o0",)}, SHORT_IDS, {},
                  takeovers={"s0": "f0"}, recovering=frozenset({"s0"}))  # fmt: skip
    standbys.sync({"j": after}, ["s0"])
    assert standbys.fetch("j", Epoch(7, 1), "f", 0).result().snapshot.plugin == "state"
    done = place(JOB, 7, {"in": ("i0",), "f": ("s0",), "out": ("o0",)}, SHORT_IDS, {},
                 takeovers={"s0": "f0"})  # fmt: skip
    standbys.sync({"j": done}, ["s0"])
    assert standbys.fetch("j", Epoch(7, 1), "f", 0) is None


def context(placement: Any, sent: list, storage: Any, rollbacks: list | None = None) -> Any:
    """f0's context under ``placement``: what it sends goes to ``sent``."""
    return TaskContext(
        placement=placement, peer="f0", router=Router(routes(placement, "f")),
        send=lambda to, m: sent.append((to, m)), report=lambda m: None,
        grant=lambda source, n, rows: None, congested=lambda: False, complete=lambda: None,
        storage=storage, rollback=(rollbacks if rollbacks is not None else []).append,
    )  # fmt: skip


def running(ctx: Any) -> TaskRunner:
    """A runner of f in ``ctx``, started afresh and running."""
    runner = TaskRunner(ctx)
    runner.recover_from(Recover(None))
    wait_for(lambda: runner.step() or runner.phase.value == "run", 5, "the runner to run", 0)
    return runner


def test_an_upstream_whose_log_overflowed_rolls_the_job_back_instead_of_failing(storage):
    """Its downstream o0 died and o1 took the seat over: the batches o1 needs were dropped."""
    rollbacks: list[str] = []
    sent: list[tuple[str, Any]] = []
    before = place(JOB, 7, {"in": ("i0",), "f": ("f0",), "out": ("o0",)}, SHORT_IDS, {})
    runner = running(context(before, sent, storage, rollbacks))
    runner.emitter.credit("o0", 10**6)
    for _ in range(3):  # 3 x 4,000 rows estimated at 128 bytes: over the 1 MiB budget
        runner.emitter.emit([{"n": n} for n in range(4000)])
    assert runner.local.causal.inflight.lost
    assert runner.meters.in_flight_overflows._value.get() >= 1
    after = place(JOB, 7, {"in": ("i0",), "f": ("f0",), "out": ("o1",)}, SHORT_IDS, {},
                  takeovers={"o1": "o0"}, recovering=frozenset({"o1"}))  # fmt: skip
    runner.rewire(context(after, sent, storage, rollbacks))
    runner.asked("o1", ReplayFrom(0))
    assert len(rollbacks) == 1
    assert "cannot recover locally: LogLost" in rollbacks[0]


def test_a_runner_made_while_its_downstream_seat_recovers_sends_it_everything_once(storage):
    """The allocation's runner of f is made after o1 took o0's seat over (the group read a new
    allocation and a takeover under it in one sync): o1 asks for every message of the
    allocation, so f sends it nothing before it asks, and everything once after."""
    placement = place(JOB, 7, {"in": ("i0",), "f": ("f0",), "out": ("o1",)}, SHORT_IDS, {},
                      takeovers={"o1": "o0"}, recovering=frozenset({"o1"}))  # fmt: skip
    sent: list[tuple[str, Any]] = []
    runner = running(context(placement, sent, storage))
    for n in range(3):
        runner.emitter.emit([{"n": n}])
    assert sent == [], "o1 has not asked yet"
    runner.asked("o1", ReplayFrom(0))
    runner.credit("o1", 10)
    assert [m for _, m in sent] == [Batch([{"n": n}]) for n in range(3)]


def test_a_runner_whose_downstream_gives_no_credit_takes_no_more_than_it_can_send(storage):
    """What o0 has no credit for waits in the in-flight log, and f takes nothing more from its
    inbox meanwhile: the backlog stays upstream, where a barrier does not wait behind it."""
    placement = place(JOB, 7, {"in": ("i0",), "f": ("f0",), "out": ("o0",)}, SHORT_IDS, {})
    sent: list[tuple[str, Any]] = []
    runner = running(context(placement, sent, storage))
    full = [{"n": n} for n in range(100)]  # a whole batch of f's: one take each
    for _ in range(20):
        runner.deliver(SHORT_IDS["i0"], Batch(full))
    for _ in range(100):
        runner.step()
    went = sum(isinstance(m, Batch) for _, m in sent)
    assert went == runner.emitter.window("o0"), "the first credit's worth went"
    assert runner.emitter.blocked()
    assert len(runner.intake.inbox.queues[SHORT_IDS["i0"]]) == 20 - went - 1, (
        "one more was taken, and waits for credit; the rest wait in the inbox"
    )


def test_a_replay_that_made_fewer_messages_than_a_downstream_seat_had_rolls_back():
    """Seat 1 had 3 messages of this seat, seat 2 none: a replay that makes 2 for seat 1 has
    lost one, which a live message would otherwise be taken for and never sent."""
    causal = CausalTask(seat=0, depth=1, budget=1 << 20)
    causal.recall(frozenset({1, 2}))
    causal.answered(1, Recalled(3, 0, []))
    causal.answered(2, Recalled(0, 0, []))
    assert causal.replay() == {1: 3, 2: 0}
    for n in range(2):
        causal.inflight.record(1, Batch([{"n": n}]), 10)
    with pytest.raises(LocalRecoveryError, match="made 2 messages for seat 1, which had 3"):
        causal.check_replayed()
    causal.inflight.record(1, Batch([{"n": 2}]), 10)
    causal.check_replayed()
