"""Segments to Arrow tables and back, without Spark: what every Spark batch crosses twice."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from peer.job.arrow_schema import arrow_schema, infer, spark_ddl, to_rows, to_table
from peer.job.schema import SchemaError, parse

CLICK = arrow_schema(parse("user string, ts timestamp, day date, n bigint, ok boolean"))

rows_of_clicks = st.lists(
    st.fixed_dictionaries(
        {
            "user": st.one_of(st.none(), st.text(max_size=5)),
            "ts": st.one_of(
                st.none(), st.integers(0, 4_000_000_000_000_000).map(lambda us: us / 1e6)
            ),
            "day": st.one_of(st.none(), st.dates().map(lambda d: d.isoformat())),
            "n": st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
            "ok": st.one_of(st.none(), st.booleans()),
        }
    ),
    max_size=20,
)


@given(rows_of_clicks)
def test_rows_come_back_as_they_went_in(rows):
    assert to_rows(to_table(rows, CLICK)) == rows


def test_a_field_missing_from_a_row_is_null():
    assert to_rows(to_table([{"user": "a"}], CLICK)) == [
        {"user": "a", "ts": None, "day": None, "n": None, "ok": None}
    ]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"user": "a", "n": "many"}, "field 'n' must hold bigint values"),
        ({"user": "a", "zip": 1}, "field 'zip' is not in the schema"),
        ({"ts": "yesterday"}, "field 'ts' must hold timestamp values"),
        ({"n": 2.5}, "field 'n' must hold bigint values, not 2.5"),
        (["a", 1], "is not a mapping of field to value"),
    ],
)
def test_a_row_that_does_not_fit_names_the_field(row, message):
    with pytest.raises(SchemaError, match=message):
        to_table([row], CLICK)


def test_inference_keeps_the_first_batch_s_types():
    schema = infer([{"user": "a", "n": 1, "share": 0.5}])
    assert schema == pa.schema([("user", pa.string()), ("n", pa.int64()), ("share", pa.float64())])
    assert spark_ddl(schema) == "`user` string, `n` bigint, `share` double"


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([], "empty batch"),
        ([{"a": None}], "field 'a' is null in every row of the first batch"),
        ([{"a": [1, 2]}], "field 'a' holds list<item: int64>: only flat fields"),
    ],
)
def test_what_cannot_be_inferred_says_why(rows, message):
    with pytest.raises(SchemaError, match=message):
        infer(rows)
