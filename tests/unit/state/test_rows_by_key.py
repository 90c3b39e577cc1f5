"""Rows taken key by key (where no window emits as segments come): for any batches, watermarks
and ticks they emit, count late and hold what the rows taken one by one in order do, for every
kind of window and aggregation, kept by the task or in the slot's keyed state; windows that do
emit as segments come take them in order."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from peer.job.spec import Trigger, Window
from peer.state import KeyedState, TaskState
from peer.state.backends import MemoryBackend
from tests.unit.state.test_state_snapshots import WINDOWS, segments
from tests.unit.state.windowed import FNS, by_user, closed, job

KEYED_BY = {"user": by_user, "none": None}
BY_KEY_TRIGGERS = (*(Trigger(w.id, "watermark") for w in WINDOWS),
                   Trigger("sliding", "timer", period=1, refinement="discarding"))  # fmt: skip
DISTINCT = Window("distinct", "agg", "fixed", f"{FNS}:DISTINCT", key="t", range=7, field="v")
steps = st.lists(
    st.one_of(
        st.lists(segments, max_size=8).map(lambda batch: ("apply", batch)),
        st.integers(0, 70).map(lambda mark: ("watermark", mark)),
    ),
    max_size=10,
)


@contextlib.contextmanager
def states(key: str, keyed: bool) -> Iterator[tuple[TaskState, TaskState]]:
    """The task's state twice, windows in memory or each in keyed state of its own; the
    second made to take rows one by one."""
    windows, key_of = (*WINDOWS, DISTINCT), KEYED_BY[key]
    made = [KeyedState(8, MemoryBackend()) for _ in range(2)] if keyed and key_of else [None] * 2
    by_key, in_order = (TaskState(job(windows, BY_KEY_TRIGGERS), "agg", key_of, held)
                        for held in made)  # fmt: skip
    in_order._take_rows = in_order._in_order
    try:
        yield by_key, in_order
    finally:
        for held in made:
            if held is not None:
                held.close()


@given(steps, st.sampled_from(sorted(KEYED_BY)), st.booleans())
def test_rows_key_by_key_give_what_rows_in_order_give(ops, key, keyed):
    with states(key, keyed) as (by_key, in_order):
        assert by_key._take_rows == by_key._by_key
        for now, (kind, arg) in enumerate(ops):
            if kind == "apply":
                assert by_key.apply(arg, float(now)) == in_order.apply(arg, float(now))
            else:
                assert closed(by_key.watermark(arg)) == closed(in_order.watermark(arg))
        assert by_key.late == in_order.late
        assert by_key.snapshot() == in_order.snapshot()
        assert closed(by_key.finish()) == closed(in_order.finish())


@pytest.mark.parametrize(
    "trigger",
    [Trigger("fixed", "segment", threshold=2), Trigger("fixed", "punctuation",
                                                       predicate=f"{FNS}:is_last")],
)  # fmt: skip
def test_a_window_that_emits_as_segments_come_takes_them_in_order(trigger):
    s = TaskState(job(WINDOWS, (trigger,)), "agg", by_user)
    assert s._take_rows == s._in_order


def test_a_late_side_output_takes_them_in_order():
    window = Window("fixed", "agg", "fixed", "count", key="t", range=10)
    valid = job((window,), (Trigger("fixed", "watermark"),))
    s = TaskState(replace(valid, windows=(replace(window, late="write"),)), "agg", by_user)
    assert s._take_rows == s._in_order
