"""An input with an ``idle_timeout`` moves its watermark on with the wall clock once it has read
nothing for that long, so a window closes on time after its source falls silent."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from peer.job.spec import JobError, Task
from peer.runtime.idleness import NEVER_IDLE, PERIOD, Idleness, idleness_for
from peer.testing import run_job
from tests.unit.runtime.runtime_fns import CLOSED, ENDED_BY

FNS = "tests.unit.runtime.runtime_fns"


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def test_only_an_input_with_an_idle_timeout_moves_on():
    assert idleness_for(Task("in", "input", plugin="p")) is NEVER_IDLE
    idle = idleness_for(Task("in", "input", plugin="p", idle_timeout=2, event_time_per_second=10))
    assert isinstance(idle, Idleness)
    assert (idle.after, idle.per_second) == (2, 10)


def test_the_watermark_moves_on_from_where_the_rows_left_it_once_idle():
    clock = Clock()
    idle = Idleness(1.0, 1000.0, clock)
    clock.now += 0.5
    assert idle.mark(7.0) == 7.0  # not idle yet
    clock.now += 0.5
    assert idle.mark(7.0) == 7.0 + 1000.0
    clock.now += PERIOD / 2
    assert idle.mark(7.0) == pytest.approx(7.0 + 1000.0)  # it moves once a period
    clock.now += PERIOD
    assert idle.mark(7.0) == pytest.approx(7.0 + 1000.0 * (1 + PERIOD))
    idle.read()
    assert idle.mark(9.0) == 9.0
    assert idle.mark(None) is None  # nothing read yet: no watermark to move on


@given(
    after=st.sampled_from([0.25, 0.5, 2.0]),
    steps=st.lists(st.tuples(st.sampled_from([0.0, 0.125, 0.5, 1.0]), st.booleans()), max_size=30),
)
def test_an_idle_mark_is_never_below_the_rows_and_grows_with_the_clock(after, steps):
    clock = Clock()
    idle = Idleness(after, 1.0, clock)
    last = None
    for wait, rows in steps:
        clock.now += wait
        if rows:
            idle.read()
        mark = idle.mark(3.0)
        assert mark >= 3.0
        assert (mark > 3.0) == (not rows and clock.now - idle.last >= after)
        if last is not None and not rows:
            assert mark >= last
        last = mark


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("idle_timeout", 0, "idle_timeout must be a number of seconds > 0, or null, got 0"),
        ("idle_timeout", "1s", "idle_timeout must be a number of seconds > 0, or null, got '1s'"),
        ("event_time_per_second", 0, "event_time_per_second must be a number > 0, got 0"),
    ],
)
def test_bad_idle_settings_are_refused(field, value, expected):
    with pytest.raises(JobError) as refused:
        run_job(job(give_up=1, **{field: value}), timeout=5)
    assert str(refused.value) == f"job 'silent': task 'read': {expected}"


def test_only_an_input_has_an_idle_timeout():
    bad = job(give_up=1)
    bad["catalog"][1]["idle_timeout"] = 1.0
    with pytest.raises(JobError) as refused:
        run_job(bad, timeout=5)
    assert str(refused.value) == (
        "job 'silent': task 'count': idle_timeout is an input's (its watermark moves on when its "
        "source is silent), got 1.0 on a function"
    )


def job(give_up: float, **read: object) -> dict:
    """Ten rows at event times 0 to 9 s, then silence; fixed windows of 5 s counted."""
    return {
        "id": "silent",
        "workflow": [["read", "count"], ["count", "write"]],
        "catalog": [
            {"name": "read", "kind": "input", "plugin": f"{FNS}:falls_silent", "n_peers": 1,
             "assign_watermark_fn": f"{FNS}:event_time",
             "params": {"count": 10, "give_up": give_up}, **read},
            {"name": "count", "kind": "function", "fn": f"{FNS}:same", "n_peers": 1},
            {"name": "write", "kind": "output", "plugin": "peer.plugins.memory:output"},
        ],
        "windows": [{"id": "counts", "task": "count", "type": "fixed", "key": "n", "range": 5,
                     "aggregation": "count"}],
        "triggers": [{"window": "counts", "on": "watermark", "emit": f"{FNS}:closed"}],
    }  # fmt: skip


def test_a_window_closes_while_its_silent_input_is_idle():
    """The last window, [5, 10), ends past the rows' watermark (9): only the idle input's
    watermark, moving on, closes it before the source ends; without it, the source gives up."""
    CLOSED.clear()
    ENDED_BY.clear()
    outputs = run_job(job(give_up=45, idle_timeout=0.2), timeout=60)
    assert ENDED_BY[:1] == ["windows closed"]
    expected = [{"start": 0, "end": 5, "count": 5}, {"start": 5, "end": 10, "count": 5}]
    assert sorted(outputs["write"], key=lambda row: row["start"]) == expected
