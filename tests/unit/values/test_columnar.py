"""Arrow batches and rows as one kind of batch: an Arrow batch's rows, columns, keys, parts and
concatenations read the same as the rows it stands for."""

from __future__ import annotations

import datetime as dt
import json
import math
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from peer.messaging.messages import END, Batch
from peer.runtime.inbox import Inbox
from peer.values.columnar import (
    FieldKey,
    SchemaViolation,
    concat,
    from_table,
    rows,
    select,
    take,
    values,
)

NAMES = ("a", "b", "c")

COLUMNS = {
    "int": (pa.int64(), st.integers(-(2**63), 2**63 - 1)),
    "float": (pa.float64(), st.floats(allow_nan=False)),
    "string": (pa.string(), st.text(max_size=4)),
    "bool": (pa.bool_(), st.booleans()),
    "list": (pa.list_(pa.int64()), st.lists(st.integers(-5, 5), max_size=3)),
}


@st.composite
def batches(draw: Any, *, min_rows: int = 0, columns: dict[str, Any] = COLUMNS) -> pa.RecordBatch:
    """A record batch of up to three columns of drawn types, nulls anywhere."""
    count = draw(st.integers(min_rows, 12))
    names = draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=3, unique=True))
    arrays = []
    for _ in names:
        kind, value = columns[draw(st.sampled_from(sorted(columns)))]
        drawn = draw(st.lists(st.one_of(st.none(), value), min_size=count, max_size=count))
        arrays.append(pa.array(drawn, kind))
    return pa.RecordBatch.from_arrays(arrays, names=names)


@given(batches())
def test_rows_of_an_arrow_batch_are_its_python_rows(batch):
    assert rows(batch) == batch.to_pylist()
    assert rows(rows(batch)) == rows(batch)


@given(batches(), st.sampled_from((*NAMES, "missing")))
def test_a_column_reads_as_its_field_in_every_row(batch, name):
    assert values(batch, name) == [row.get(name) for row in rows(batch)]


@given(batches(), st.lists(st.sampled_from((*NAMES, "missing")), max_size=4))
def test_select_keeps_the_fields_it_has_and_every_row(batch, names):
    chosen = select(batch, names)
    assert chosen.num_rows == batch.num_rows
    assert rows(chosen) == [{n: row[n] for n in names if n in row} for row in rows(batch)]


@given(batches(min_rows=1), st.data())
def test_take_gives_the_rows_at_the_indices_in_either_kind(batch, data):
    indices = data.draw(st.lists(st.integers(0, batch.num_rows - 1), max_size=8))
    assert rows(take(batch, indices)) == take(rows(batch), indices)


@given(st.lists(batches(), max_size=4), st.booleans())
def test_concat_keeps_every_row_in_order(parts, as_rows):
    parts = [rows(p) if as_rows and i % 2 else p for i, p in enumerate(parts)]
    assert rows(concat(parts)) == [row for part in parts for row in rows(part)]


def test_concat_keeps_arrow_of_one_schema_as_arrow():
    one = pa.RecordBatch.from_pylist([{"n": 1}, {"n": 2}])
    joined = concat([one, one.slice(1)])
    assert isinstance(joined, pa.RecordBatch)
    assert joined.to_pylist() == [{"n": 1}, {"n": 2}, {"n": 2}]
    assert concat([one]) is one
    assert concat([]) == []
    mixed = concat([one, pa.RecordBatch.from_pylist([{"n": "x"}])])
    assert mixed == [{"n": 1}, {"n": 2}, {"n": "x"}]


def test_a_table_becomes_one_record_batch():
    schema = pa.schema([("n", pa.int64())])
    assert from_table(schema.empty_table()).schema == schema
    assert from_table(schema.empty_table()).num_rows == 0
    two = pa.Table.from_batches([pa.RecordBatch.from_pylist([{"n": 1}])] * 2)
    assert from_table(two).to_pylist() == [{"n": 1}, {"n": 1}]


def test_rows_are_plain_as_segments_travel():
    batch = pa.RecordBatch.from_arrays(
        [
            pa.array([dt.datetime(2024, 1, 1, tzinfo=dt.UTC)], pa.timestamp("ms", tz="UTC")),
            pa.array([dt.date(2024, 1, 2)], pa.date32()),
            pa.array([Decimal("1.50")], pa.decimal128(5, 2)),
        ],
        names=["ts", "day", "price"],
    )
    assert rows(batch) == [{"ts": 1704067200.0, "day": "2024-01-02", "price": 1.5}]
    assert values(batch, "ts") == [1704067200.0]


@given(batches(), st.sampled_from(["a", ("a", "b"), ("c", "a")]))
def test_a_field_key_reads_columns_as_it_reads_rows(batch, fields):
    key = FieldKey(fields)
    assume(set(key.names) <= set(batch.schema.names))
    expected = [key(row) for row in rows(batch)]
    assert key.of(batch) == expected
    keys, index = key.distinct(batch)
    assert _text([keys[i] for i in index.to_pylist()]) == _text(expected)


@given(batches(min_rows=1), st.sampled_from(["missing", ("a", "missing"), ("b", "a")]))
def test_a_field_key_refuses_a_batch_without_its_column_as_it_refuses_its_rows(batch, fields):
    """The first field missing, in the key's order, is named, with the first row."""
    key = FieldKey(fields, "count")
    assume(not set(key.names) <= set(batch.schema.names))
    with pytest.raises(SchemaViolation) as by_row:
        key(rows(batch)[0])
    with pytest.raises(SchemaViolation) as by_columns:
        key.distinct(batch)
    assert str(by_columns.value) == str(by_row.value)
    missing = next(name for name in key.names if name not in batch.schema.names)
    assert str(by_row.value).startswith(f"task 'count' groups by {missing!r}, which segment {{")
    assert FieldKey(fields).of(batch.slice(0, 0)) == [], "no row lacks it in an empty batch"


def test_a_field_key_takes_a_null_and_refuses_an_absent_field():
    key = FieldKey("user", "count")
    assert key({"user": None}) is None
    assert FieldKey(("user", "region"))({"user": "u", "region": None}) == ["u", None]
    with pytest.raises(SchemaViolation, match=r"^task 'count' groups by 'user', which segment "
                                              r"\{'word': 'x'\} lacks$"):  # fmt: skip
        key({"word": "x"})
    long = {"word": "x" * 10_000, **{f"f{i}": i for i in range(100)}}
    with pytest.raises(SchemaViolation) as refused:
        key(long)
    assert len(str(refused.value)) < 300, "a large segment is shown cut short"


def test_distinct_reads_each_string_key_once():
    batch = pa.RecordBatch.from_pylist([{"u": "x"}, {"u": None}, {"u": "x"}])
    keys, index = FieldKey("u").distinct(batch)
    assert keys == ["x", None]
    assert index.to_pylist() == [0, 1, 0]


def _text(keys: list[Any]) -> list[str]:
    """Keys as the canonical text they are hashed by (NaN is not equal to itself)."""
    return [json.dumps(k, sort_keys=True) for k in keys]


def test_an_inbox_takes_arrow_batches_whole_and_as_arrow():
    inbox = Inbox(frozenset({1, 2}))
    first = pa.RecordBatch.from_pylist([{"n": 1}, {"n": 2}])
    inbox.put(1, Batch(first))
    inbox.put(1, END)
    assert inbox.take(1) is first
    assert inbox.take(10) == []
    assert inbox.ended == {1}
    inbox.put(2, Batch(first))
    inbox.put(2, Batch([{"n": 3}]))
    assert inbox.take(10) == [{"n": 1}, {"n": 2}, {"n": 3}]


@pytest.mark.parametrize("value", [math.nan, -0.0, math.inf])
def test_float_keys_are_read_row_by_row(value):
    batch = pa.RecordBatch.from_pylist([{"x": value}, {"x": 0.0}])
    keys, index = FieldKey("x").distinct(batch)
    assert _text([keys[i] for i in index.to_pylist()]) == _text([value, 0.0])
