"""The coordinator's epochs under a clock the test turns: an epoch every peer acknowledges
commits; one that is not acknowledged within the job's checkpoint timeout is abandoned, the next
starts at once, and more abandoned in a row than the job tolerates roll the job back, once per
timeout until the new version comes, naming the tasks that did not acknowledge."""

from __future__ import annotations

import uuid
from concurrent.futures import Executor, Future
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from peer.job.spec import Job, JobError, Task
from peer.job.validate import validate
from peer.log.stores.memory import MemoryLog
from peer.messaging.messages import Barrier, Committed
from peer.metrics import ABANDONED_EPOCHS
from peer.runtime.checkpoints import STOPPED, CheckpointStorage, Commits
from peer.runtime.coordinator import Coordinator, CoordinatorState
from peer.runtime.placement import place
from peer.values.epoch import Epoch


class Inline(Executor):
    """Runs what is submitted at once: the test, not a thread, decides when a step happens."""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        future.set_result(fn(*args, **kwargs))
        return future


FNS = "tests.unit.runtime.runtime_fns"


def make_job(job_id: str, keyed: bool = False, **settings: Any) -> Job:
    catalog = (
        Task("in", "input", plugin="peer.plugins.memory:input"),
        Task("f", "function", fn=f"{FNS}:double", group_by_key="n" if keyed else None),
        Task("out", "output", plugin="peer.plugins.null:output"),
    )
    return Job(workflow=(("in", "f"), ("f", "out")), catalog=catalog, id=job_id, **settings)


class World:
    """A coordinator of one allocation, what it sent, and the rollbacks it wrote."""

    def __init__(self, keyed: bool = False, **settings: Any) -> None:
        self.job = make_job(f"j{uuid.uuid4().hex[:8]}", keyed, **settings)
        allocation = {"in": ("i1",), "f": ("f1", "f2"), "out": ("o1",)}
        short_ids = {self.job.id: 0, "i1": 1, "f1": 2, "f2": 3, "o1": 4}
        placement = place(self.job, 5, allocation, short_ids, dict.fromkeys(short_ids, "g"))
        self.sent: list[tuple[str, Any]] = []
        self.rollbacks: list[str] = []
        self.grown = 0
        self.commits = Commits(MemoryLog().session(), self.job.id)
        self.coordinator = Coordinator(
            placement=placement,
            commits=self.commits,
            storage=CheckpointStorage("memory://coordinator", uuid.uuid4().hex),
            pool=Inline(),
            send=lambda peer, message: self.sent.append((peer, message)),
            rollback=self.rollbacks.append,
            grow=self.grow,
        )
        self.now = 0.0

    def grow(self) -> None:
        self.grown += 1

    def run(self, until: float) -> None:
        """Steps the coordinator while it has something to do, at every tenth of a second."""
        while self.now < until:
            while self.coordinator.step(self.now):
                pass
            self.now = round(self.now + 0.1, 6)

    def barriers(self) -> list[int]:
        return [m.epoch for _, m in self.sent if isinstance(m, Barrier)]

    def ack(self, epoch: int, peers: tuple[str, ...] = ("i1", "f1", "f2", "o1")) -> None:
        for peer in peers:
            self.coordinator.on_ack(peer, epoch)


def abandoned(job_id: str) -> float:
    return ABANDONED_EPOCHS.labels(job_id)._value.get()


def test_an_epoch_every_peer_acknowledges_commits_and_the_next_follows_a_period_later():
    w = World(barrier_period=1.0, checkpoint_timeout=3.0)
    w.run(0.5)
    assert w.barriers() == [1]
    w.ack(1)
    w.run(1.0)
    assert w.commits.read()[0].committed == Epoch(5, 1)
    w.run(1.5)
    assert w.barriers() == [1, 2]
    assert abandoned(w.job.id) == 0


def test_a_commit_names_each_keyed_tasks_key_groups_and_so_does_the_next_restore_point():
    w = World(keyed=True, barrier_period=1.0, max_parallelism=16)
    w.run(0.5)
    w.ack(1)
    w.run(1.0)
    record = w.commits.read()[0]
    groups = {"f": 16, "in": 16}  # the input may run on more peers: its splits
    assert (record.slots, record.groups) == ({"f": 2, "in": 1, "out": 1}, groups)
    point = w.coordinator.restore_point
    assert point is not None
    assert (point.slots, point.groups) == (record.slots, groups)


def test_a_commit_records_where_its_snapshots_chains_start_and_storage_keeps_them():
    """Each ack says where its snapshot's chain starts: the commit keeps the least, and the
    collection after it keeps the epochs from the previous commit's chains on."""
    w = World(barrier_period=1.0)
    for epoch, sinces in [(1, (1, 1, 1, 1)), (2, (1, 2, 1, 2)), (3, (3, 2, 3, 3))]:
        w.run(epoch - 0.5)
        for peer, since in zip(("i1", "f1", "f2", "o1"), sinces, strict=True):
            w.coordinator.on_ack(peer, epoch, since)
        w.run(epoch)
    record = w.commits.read()[0]
    assert (record.committed, record.since, record.floor) == (Epoch(5, 3), 2, Epoch(5, 1))
    assert not record.retains(Epoch(4, 9))
    assert record.retains(Epoch(5, 1))
    w.run(3.5)
    w.coordinator.on_ack("i1", 4)  # an ack from a peer of the layout before: its snapshot whole
    w.ack(4, ("f1", "f2", "o1"))
    w.run(4.0)
    assert w.commits.read()[0].since == 4


def test_an_epoch_not_acknowledged_in_time_is_abandoned_and_the_next_starts_at_once(caplog):
    w = World(barrier_period=1.0, checkpoint_timeout=3.0, tolerable_abandoned_epochs=1)
    w.ack(1, ("i1", "f1", "o1"))
    w.run(3.0)
    assert w.barriers() == [1]
    w.ack(1, ("i1", "f1", "o1"))
    w.run(3.5)
    assert w.barriers() == [1, 2]
    assert abandoned(w.job.id) == 1
    assert "epoch 1 of allocation 5 abandoned" in caplog.text
    assert "task 'f' (peers f2)" in caplog.text
    assert w.rollbacks == []
    w.ack(1)  # a late ack of the abandoned epoch does not count for the next
    w.run(4.0)
    assert w.commits.read()[0].committed is None
    w.ack(2)
    w.run(4.5)
    assert w.commits.read()[0].committed == Epoch(5, 2)
    assert w.coordinator.abandoned == 0


def test_more_abandoned_in_a_row_than_tolerated_roll_the_job_back_again_each_timeout():
    w = World(barrier_period=1.0, checkpoint_timeout=2.0, tolerable_abandoned_epochs=1)
    w.run(4.5)
    assert w.barriers() == [1, 2]
    assert len(w.rollbacks) == 1
    assert "2 epochs in a row abandoned" in w.rollbacks[0]
    assert "epoch 2 of allocation 5" in w.rollbacks[0]
    assert "task 'in' (peers i1)" in w.rollbacks[0]
    assert w.coordinator.state is CoordinatorState.ROLLING_BACK
    w.run(6.5)
    assert w.barriers() == [1, 2]
    assert len(w.rollbacks) == 2
    assert abandoned(w.job.id) == 2


def test_none_tolerated_rolls_back_at_the_first_abandoned_epoch():
    w = World(barrier_period=1.0, checkpoint_timeout=2.0, tolerable_abandoned_epochs=0)
    w.run(2.5)
    assert w.barriers() == [1]
    assert len(w.rollbacks) == 1


def test_an_abandoned_final_epoch_is_followed_by_another_final_one():
    w = World(barrier_period=1.0, checkpoint_timeout=2.0, tolerable_abandoned_epochs=1)
    w.coordinator.on_drained("o1")
    w.run(2.5)
    assert [(m.epoch, m.final) for _, m in w.sent if isinstance(m, Barrier)] == [
        (1, True),
        (2, True),
    ]
    w.ack(2)
    w.run(3.0)
    assert w.commits.read()[0].committed == Epoch(5, 2)


def test_a_stop_s_savepoint_fences_the_record_in_the_commit_that_takes_it():
    """Stop with a savepoint: the epoch committed takes it and fences the record at once, so
    the epoch after it, acknowledged too, is never committed, and nobody hears of it."""
    w = World(barrier_period=1.0, checkpoint_timeout=30.0)
    w.run(0.5)
    w.commits.request_savepoint("last", stop=True)
    w.ack(1)
    w.run(1.5)
    record = w.commits.read()[0]
    assert record.savepoints["last"].epoch == Epoch(5, 1)
    assert record.owner == STOPPED
    assert record.stop is None
    w.ack(2)
    w.run(5.0)
    assert w.commits.read()[0].committed == Epoch(5, 1)
    assert w.coordinator.state is CoordinatorState.STALE
    assert {m.epoch for _, m in w.sent if isinstance(m, Committed)} == {1}


def test_a_fenced_record_lets_the_coordinator_commit_nothing_more():
    """A stop's fence: the epoch in flight is refused, and nobody hears it committed."""
    w = World(barrier_period=1.0, checkpoint_timeout=30.0)
    w.run(0.5)
    w.ack(1)
    w.run(1.5)
    assert w.barriers() == [1, 2]
    w.commits.claim(STOPPED)
    w.ack(2)
    w.run(5.0)
    assert w.commits.read()[0].committed == Epoch(5, 1)
    assert w.coordinator.state is CoordinatorState.STALE
    assert {m.epoch for _, m in w.sent if isinstance(m, Committed)} == {1}
    assert w.barriers() == [1, 2]


def paused_after_epoch_1(flag: str) -> World:
    """Epoch 1 commits, then the coordinator's ``flag`` (handing_over, held_back) is set: the
    barrier it sends next, epoch 2's, is a pause."""
    w = World(barrier_period=10.0, checkpoint_timeout=30.0)
    w.run(0.5)
    w.ack(1)
    w.run(1.0)
    setattr(w.coordinator, flag, True)
    w.run(1.2)
    assert [(m.epoch, m.pause) for _, m in w.sent if isinstance(m, Barrier)] == [
        (1, False),
        (2, True),
    ]
    return w


def test_a_hand_over_pauses_at_its_next_barrier_commits_it_quiesced_and_sends_no_more():
    """A member of the job is leaving: the next barrier, sent at once, is a pause; its commit
    says the job stands still there, and a restore from it is a hand-over's, not a rollback."""
    w = paused_after_epoch_1("handing_over")
    w.ack(2)
    w.run(40.0)
    record = w.commits.read()[0]
    assert (record.committed, record.quiesced, record.scope) == (Epoch(5, 2), True, "handover")
    assert w.barriers() == [1, 2], "nothing after the pause"
    assert w.coordinator.restore_point.scope == "handover"


def test_a_leave_that_leaves_the_allocation_as_it_was_ends_the_pause_at_once():
    """Standbys took the leaving member's seats over: same allocation, and the job goes on."""
    w = World(barrier_period=10.0, checkpoint_timeout=30.0)
    w.coordinator.handing_over = True
    w.run(0.5)
    w.ack(1)
    w.run(2.0)
    assert w.barriers() == [1]
    w.coordinator.handing_over = False
    w.run(2.2)
    assert [(m.epoch, m.pause) for _, m in w.sent if isinstance(m, Barrier)] == [
        (1, True),
        (2, False),
    ]


def test_a_job_held_back_pauses_and_asks_once_to_grow_at_the_pause_commit():
    """The allocation holds the job back from growing: the next barrier is a pause, and only
    once its epoch commits, quiesced, does the coordinator ask for the job to grow."""
    w = paused_after_epoch_1("held_back")
    assert w.grown == 0, "not before the pause commits"
    w.ack(2)
    w.run(40.0)
    assert w.grown == 1
    record = w.commits.read()[0]
    assert (record.committed, record.scope) == (Epoch(5, 2), "handover")
    assert w.barriers() == [1, 2], "the job stands still until it grows"


def test_a_job_no_longer_held_back_goes_on_after_its_pause():
    """The peers it would have grown onto went away: the job reads again at once."""
    w = World(barrier_period=10.0, checkpoint_timeout=30.0)
    w.coordinator.held_back = True
    w.run(0.5)
    w.ack(1)
    w.run(2.0)
    assert w.grown == 1
    w.coordinator.held_back = False
    w.run(2.2)
    assert [(m.epoch, m.pause) for _, m in w.sent if isinstance(m, Barrier)] == [
        (1, True),
        (2, False),
    ]


def test_an_abandoned_pause_is_sent_again():
    w = World(barrier_period=1.0, checkpoint_timeout=3.0, tolerable_abandoned_epochs=5)
    w.coordinator.handing_over = True
    w.run(3.5)
    w.ack(2)
    w.run(4.0)
    assert [(m.epoch, m.pause) for _, m in w.sent if isinstance(m, Barrier)] == [
        (1, True),
        (2, True),
    ]
    assert w.commits.read()[0].quiesced


def test_the_default_timeout_is_five_periods_and_at_least_ten_seconds():
    assert make_job("a", barrier_period=1.0).epoch_timeout == 10.0
    assert make_job("a", barrier_period=4.0).epoch_timeout == 20.0
    assert make_job("a", barrier_period=4.0, checkpoint_timeout=1.5).epoch_timeout == 1.5


@given(
    acks=st.lists(st.sets(st.sampled_from(("i1", "f1", "f2", "o1"))), min_size=1, max_size=8),
    tolerable=st.integers(0, 3),
)
def test_the_coordinator_never_goes_longer_than_its_timeouts_without_a_commit_or_a_rollback(
    acks: list[set[str]], tolerable: int
):
    """Whatever subset of peers acknowledges each epoch, within (tolerable + 1) timeouts of the
    last commit the job has either committed again or been rolled back."""
    assume(any(a != {"i1", "f1", "f2", "o1"} for a in acks))
    w = World(barrier_period=1.0, checkpoint_timeout=2.0, tolerable_abandoned_epochs=tolerable)
    last_progress = 0.0
    for peers in acks:
        w.run(w.now + 1.1)
        w.ack(w.coordinator.epoch, tuple(sorted(peers)))
        before = w.commits.read()[0]
        w.run(w.now + 1.1)
        if w.commits.read()[0] != before or w.rollbacks:
            last_progress = w.now
        assert w.now - last_progress <= (tolerable + 1) * 2.0 + 2.5
        if w.rollbacks:
            break


@pytest.mark.parametrize("value", [0, -1, float("nan"), "10", True])
def test_a_bad_checkpoint_timeout_is_refused_naming_the_field(value):
    with pytest.raises(JobError, match="checkpoint_timeout must be a number of seconds > 0"):
        validate(make_job("bad", checkpoint_timeout=value), imports=False)


@pytest.mark.parametrize("value", [-1, 1.5, None, True])
def test_a_bad_tolerable_abandoned_epochs_is_refused_naming_the_field(value):
    with pytest.raises(JobError, match="tolerable_abandoned_epochs must be an int >= 0"):
        validate(make_job("bad", tolerable_abandoned_epochs=value), imports=False)
