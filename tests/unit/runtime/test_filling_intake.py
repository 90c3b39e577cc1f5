"""An input with a ``max_batch_delay`` holds a short poll back, polls again once the delay is over
and lets both go, and lets nothing it read pass a barrier, a watermark or the end before it."""

from __future__ import annotations

import math

import pyarrow as pa
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from peer.job.spec import Task
from peer.messaging.messages import Barrier
from peer.runtime.intake import FillingIntake, PluginIntake, intake_for
from peer.testing import run_job
from peer.values.columnar import rows
from tests.unit.runtime.runtime_fns import BATCH_SIZES

FNS = "tests.unit.runtime.runtime_fns"


class Trickle:
    """A source that has, at each poll, the next of ``polls`` rows ready (fewer if asked
    fewer); what is not taken stays for the next poll."""

    def __init__(self, polls: list[int], *, arrow: bool = False) -> None:
        self.ready = list(polls)
        self.next = 0
        self.waiting = 0
        self.arrow = arrow
        self.polls = 0

    def poll(self, limit: int) -> object:
        assert limit > 0, f"polled for {limit} rows"
        self.polls += 1
        if self.ready:
            self.waiting += self.ready.pop(0)
        n = min(limit, self.waiting)
        self.waiting -= n
        got = [{"n": i, "t": float(i)} for i in range(self.next, self.next + n)]
        self.next += n
        if self.arrow:
            return pa.RecordBatch.from_pylist(got) if got else []
        return got

    def watermark(self) -> float | None:
        return self.next - 1.0 if self.next else None

    def completed(self) -> bool:
        return not self.ready and not self.waiting

    def synced(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def filling(polls: list[int], *, size: int = 10, delay: float = 0.5, arrow: bool = False):
    clock = Clock()
    intake = FillingIntake(
        Task("in", "input", plugin="p", batch_size=size, max_batch_delay=delay), clock
    )
    intake.attach(Trickle(polls, arrow=arrow), None)
    return intake, clock


def numbers(batch: object) -> list[int]:
    return [row["n"] for row in rows(batch)]


@pytest.mark.parametrize("delay", [0.0, 0.2])
def test_a_trickling_input_makes_a_batch_a_delay(delay):
    """A job run end to end over a source that has 1,000 segments a second for 0.3 s: with a
    delay of 0.2 s its batches are a few (one a delay, and one at each barrier), and every
    segment comes out once, as it does without."""
    BATCH_SIZES.clear()
    job = {
        "id": f"trickle-{int(delay * 1000)}",
        "workflow": [["read", "pass"], ["pass", "write"]],
        "catalog": [
            {"name": "read", "kind": "input", "plugin": f"{FNS}:paced", "n_peers": 1,
             "params": {"count": 300, "rate": 1000.0}, "batch_size": 1000,
             "max_batch_delay": delay},
            {"name": "pass", "kind": "function", "fn": f"{FNS}:same", "chaining": False},
            {"name": "write", "kind": "output", "plugin": "peer.plugins.memory:output"},
        ],
        "lifecycles": [{"task": "pass", "before_batch": f"{FNS}:note_batch_size"}],
        "barrier_period": 1.0,
    }  # fmt: skip
    outputs = run_job(job, timeout=60)
    assert sorted(s["n"] for s in outputs["write"]) == list(range(300))
    assert sum(BATCH_SIZES) == 300
    if delay:
        assert len(BATCH_SIZES) <= 8, BATCH_SIZES


def test_an_input_without_a_delay_reads_as_it_polls():
    task = Task("in", "input", plugin="p")
    assert type(intake_for(task, frozenset(), lambda *_: None, None)) is PluginIntake
    delayed = Task("in", "input", plugin="p", max_batch_delay=0.002)
    assert type(intake_for(delayed, frozenset(), lambda *_: None, None)) is FillingIntake


def test_a_short_poll_is_held_and_the_source_polled_again_once_the_delay_is_over():
    intake, clock = filling([3, 3, 3, 3, 3])
    assert [intake.read() for _ in range(3)] == [[], [], []]
    assert intake.plugin.polls == 1  # no poll while the delay runs
    clock.now += 0.375
    assert intake.patience() == 0.125
    assert intake.read() == []
    clock.now += 0.125
    assert numbers(intake.read()) == list(range(6))
    assert intake.plugin.polls == 2
    assert intake.patience() == math.inf


def test_a_full_poll_leaves_at_once():
    intake, _ = filling([12])
    assert numbers(intake.read()) == list(range(10))
    assert intake.held == []


def test_a_barrier_waits_behind_the_rows_held_and_the_watermark_stays_before_them():
    intake, _ = filling([4, 4])
    assert intake.read() == []
    assert intake.mark() is None  # nothing had left when the holding began
    intake.deliver(0, Barrier(1))
    assert intake.next_barrier() is None
    assert numbers(intake.read()) == [0, 1, 2, 3]
    assert intake.mark() == 3.0
    assert intake.next_barrier() == Barrier(1)


def test_the_input_ends_only_once_nothing_is_held():
    intake, _ = filling([2])
    assert intake.read() == []
    assert not intake.finished()  # the source is done, but two rows are held
    assert numbers(intake.read()) == [0, 1]
    assert intake.finished()


def test_arrow_polls_leave_as_one_record_batch():
    intake, clock = filling([4, 6], arrow=True)
    assert intake.read() == []
    clock.now += 0.5
    batch = intake.read()
    assert isinstance(batch, pa.RecordBatch)
    assert numbers(batch) == list(range(10))


def test_a_smaller_limit_from_downstream_lets_the_held_rows_go():
    intake, _ = filling([6, 6])
    assert intake.read() == []
    intake.follow(4)
    assert numbers(intake.read()) == list(range(6))
    assert numbers(intake.read()) == [6, 7, 8, 9]


@given(
    polls=st.lists(st.integers(0, 15), max_size=30),
    steps=st.lists(st.sampled_from([0.0, 0.125, 0.25, 0.75]), min_size=1, max_size=30),
    barriers=st.sets(st.integers(0, 60)),
    size=st.integers(1, 12),
)
def test_every_row_leaves_once_in_order_within_its_batch_and_delay(polls, steps, barriers, size):
    assume(any(steps))  # time passes
    intake, clock = filling(polls, size=size)
    left: list[int] = []
    turn = 0
    while not intake.finished():
        if turn in barriers:
            intake.deliver(0, Barrier(turn))
        while intake.next_barrier() is not None:
            assert intake.rows == 0, "a barrier passed rows held before it"
        since = intake.since if intake.held else None
        mark = intake.mark()
        batch = intake.read()
        if intake.held:
            assert clock.now - intake.since < 0.5, "rows held past the delay"
        if batch:
            assert len(batch) <= size
            if len(batch) < size:  # not full: let go for its delay, a barrier, or the end
                due = since is not None and clock.now - since >= 0.5
                assert due or intake.barriers or intake.plugin.completed()
            assert mark is None or mark < numbers(batch)[0], "the watermark passed rows held"
            left += numbers(batch)
        clock.now += steps[turn % len(steps)]
        turn += 1
    assert left == list(range(sum(polls)))
