"""Windows taking Arrow batches by their columns (peer.state.window_columns): for any batches,
watermarks and timer ticks they emit, count late and hold what the same rows taken one by one
do, whether the windows are kept by the task or in the slot's keyed state; and a batch whose
columns do not allow it is taken as rows."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from peer.job.spec import Trigger, Window
from peer.state import KeyedState, TaskState
from peer.state.backends import MemoryBackend
from peer.state.window_columns import qualifies, shares
from peer.state.windows import extents
from peer.values.columnar import FieldKey
from tests.unit.state.windowed import FNS, closed, job

AGGREGATIONS = ("count", "sum", "min", "max", "average", "top")
KEYS = {"user": FieldKey("user"), "pair": FieldKey(("user", "v")), "none": None}


@st.composite
def windows(draw: st.DrawFn) -> Window:
    kind = draw(st.sampled_from(["fixed", "sliding", "global"]))
    agg = draw(st.sampled_from(AGGREGATIONS))
    more = {"field": "v"} if agg != "count" else {}
    if agg == "top":
        more["top"] = draw(st.integers(1, 3))
    if kind == "global":
        return Window("w", "agg", "global", agg, **more)
    step = draw(st.sampled_from([10, 2.5, 0.1, 0.3, 3]))
    if kind == "fixed":
        return Window("w", "agg", "fixed", agg, key="t", range=step, **more)
    return Window("w", "agg", "sliding", agg, key="t", range=step * draw(st.integers(1, 3)),
                  slide=step, **more)  # fmt: skip


times = st.one_of(
    st.integers(-30, 60),
    st.integers(-300, 600).map(lambda n: n / 10),
    st.floats(-50, 80, allow_nan=False, width=32).map(float),
)
row = st.fixed_dictionaries(
    {"user": st.sampled_from(["a", "b", "c"]), "t": times, "v": st.integers(-5, 5),
     "note": st.text(max_size=2)}
)  # fmt: skip
batches = st.lists(st.lists(row, max_size=25), min_size=1, max_size=4)
setups = st.tuples(st.sampled_from(sorted(KEYS)), st.booleans(), st.booleans())
"""The key, whether the windows are in keyed state, and whether a timer trigger fires too."""


def columns(rows: list[dict]) -> pa.RecordBatch:
    """The rows as a batch whose time column is all integers or all floats, as Arrow holds it."""
    if rows and len({type(row["t"]) for row in rows}) > 1:
        rows = [{**row, "t": float(row["t"])} for row in rows]
    schema = pa.schema([("user", pa.string()), ("t", pa.float64()), ("v", pa.int64()),
                        ("note", pa.string())])  # fmt: skip
    if rows and isinstance(rows[0]["t"], int):
        schema = schema.set(1, pa.field("t", pa.int64()))
    return pa.RecordBatch.from_pylist(rows, schema=schema)


@contextlib.contextmanager
def pair(window: Window, triggers: tuple[Trigger, ...], key: str,
         keyed: bool) -> Iterator[tuple[TaskState, TaskState]]:  # fmt: skip
    """Two states of the same task, in memory or each in keyed state of its own."""
    key_of = KEYS[key]
    if not keyed or key_of is None:
        yield (TaskState(job((window,), triggers), "agg", key_of),
               TaskState(job((window,), triggers), "agg", key_of))  # fmt: skip
        return
    one, two = KeyedState(8, MemoryBackend()), KeyedState(8, MemoryBackend())
    try:
        yield (TaskState(job((window,), triggers), "agg", key_of, one),
               TaskState(job((window,), triggers), "agg", key_of, two))  # fmt: skip
    finally:
        one.close()
        two.close()


@given(windows(), batches, st.lists(times, max_size=4), setups)
def test_columns_give_what_rows_give(window, steps, marks, setup):
    key, keyed, timer = setup
    triggers = (Trigger("w", "watermark"), *([Trigger("w", "timer", period=1)] if timer else []))
    with pair(window, triggers, key, keyed) as (by_columns, by_rows):
        assert by_columns.by_columns
        for i, rows in enumerate(steps):
            batch = columns(rows)
            assert by_columns.apply(batch, float(i)) == by_rows.apply(batch.to_pylist(), float(i))
            if i < len(marks):
                assert closed(by_columns.watermark(marks[i])) == closed(by_rows.watermark(marks[i]))
        assert by_columns.late == by_rows.late
        assert by_columns.snapshot() == by_rows.snapshot()
        assert closed(by_columns.finish()) == closed(by_rows.finish())


@given(windows(), batches.map(lambda steps: steps[0]), times)
def test_every_batch_of_numbers_is_taken_by_columns(window, rows, mark):
    taken = shares(window, columns(rows), np.zeros(len(rows), dtype=np.int64), mark)
    assert taken is not None
    assert sum(taken.sizes) >= len(rows) - taken.late


FIXED = Window("w", "agg", "fixed", "count", key="t", range=10)
WATERMARK = Trigger("w", "watermark")


@pytest.mark.parametrize(
    ("window", "trigger", "expected"),
    [
        (FIXED, WATERMARK, True),
        (FIXED, Trigger("w", "segment", threshold=2), False),
        (FIXED, Trigger("w", "punctuation", predicate=f"{FNS}:is_last"), False),
        (Window("w", "agg", "session", "count", key="t", gap=3), WATERMARK, False),
        (Window("w", "agg", "fixed", "collect", key="t", range=10), WATERMARK, False),
        (replace(FIXED, late="side"), WATERMARK, False),
        (Window("w", "agg", "global", f"{FNS}:DISTINCT", field="v"), WATERMARK, False),
    ],
)
def test_which_windows_take_columns(window, trigger, expected):
    valid = job((replace(window, late=None),), (trigger,))
    s = TaskState(replace(valid, windows=(window,)), "agg", FieldKey("user"))
    assert s.by_columns is expected
    assert qualifies(window) is (window.type != "session" and window.aggregation == "count")


SUMMED = Window("w", "agg", "fixed", "sum", key="t", range=10, field="v")


def summed(values: pa.Array) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array(["a", "a", "b"]), pa.array([1, 2, 3]), values],
                                      names=["user", "t", "v"])  # fmt: skip


@pytest.mark.parametrize(
    ("name", "values"),
    [
        ("a float sum", pa.array([0.1, 0.2, 0.3])),
        ("an unsigned 64-bit", pa.array([1, 2, 3], pa.uint64())),
        ("a sum that could overflow int64", pa.array([2**62, 2**62, -1], pa.int64())),
    ],
)
def test_a_column_that_does_not_allow_it_is_taken_as_rows(name, values):
    batch = summed(values)
    assert shares(SUMMED, batch, np.zeros(3, dtype=np.int64), -np.inf) is None, name
    with pair(SUMMED, (Trigger("w", "watermark"),), "user", False) as (by_columns, by_rows):
        assert by_columns.apply(batch, 0) == by_rows.apply(batch.to_pylist(), 0)
        assert closed(by_columns.finish()) == closed(by_rows.finish())


def test_a_null_to_sum_is_refused_as_rows_refuse_it():
    batch = summed(pa.array([1, None, 3], pa.int64()))
    assert shares(SUMMED, batch, np.zeros(3, dtype=np.int64), -np.inf) is None
    with pair(SUMMED, (Trigger("w", "watermark"),), "user", False) as (by_columns, by_rows):
        with pytest.raises(TypeError):
            by_rows.apply(batch.to_pylist(), 0)
        with pytest.raises(TypeError):
            by_columns.apply(batch, 0)


@pytest.mark.parametrize("t", [[1.0, float("nan")], [1.0, float("inf")], [2.0**53, 1.0], [None, 1]])
def test_a_time_column_that_does_not_allow_it_is_not_taken_by_columns(t):
    window = Window("w", "agg", "fixed", "count", key="t", range=10)
    batch = pa.RecordBatch.from_arrays([pa.array(t, pa.float64())], names=["t"])
    assert shares(window, batch, np.zeros(2, dtype=np.int64), -np.inf) is None


@pytest.mark.parametrize("t", [[1, -(2**63)], [1, 2**63 - 1], [1, -(2**53)]])
def test_an_integer_time_out_of_floats_reach_is_not_taken_by_columns(t):
    window = Window("w", "agg", "fixed", "count", key="t", range=10)
    batch = pa.RecordBatch.from_arrays([pa.array(t, pa.int64())], names=["t"])
    assert shares(window, batch, np.zeros(2, dtype=np.int64), -np.inf) is None


@pytest.mark.parametrize("kind", ["fixed", "sliding"])
@pytest.mark.parametrize("step", [0.1, 0.3, 0.7, 2.5, 3])
def test_each_row_falls_in_the_extents_its_time_falls_in_one_by_one(kind, step):
    """On a grid where ``t / step`` rounds across a boundary, for floats and integers alike."""
    more = {"slide": step, "range": step * 3} if kind == "sliding" else {"range": step}
    window = Window("w", "agg", kind, "count", key="t", **more)
    for t in ([n / 10 for n in range(-3000, 3000)], list(range(-300, 300))):
        taken = shares(window, pa.RecordBatch.from_pydict({"t": t}), np.arange(len(t)), -np.inf)
        assert taken is not None
        placed = sorted(zip(taken.keys, taken.extents, strict=True))
        assert placed == sorted((i, e) for i, each in enumerate(t) for e in extents(window, each))
