"""Frame bodies: rows and Arrow batches come back exactly, and what cannot travel is refused
naming where it is, on the way out and on the way in."""

from __future__ import annotations

import contextlib
import datetime
import decimal
import math
import string
import struct
import uuid
from collections import OrderedDict
from enum import IntEnum

import msgpack
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from peer.messaging.codec import (
    MAX_DEPTH,
    CodecError,
    decode_arrow,
    decode_rows,
    encode_arrow,
    encode_rows,
)

EXAMPLES = settings(max_examples=200, deadline=None)

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text()
    | st.binary(max_size=16)
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=30,
)
segments = st.lists(st.dictionaries(st.text(max_size=6), values, max_size=5), max_size=20)
names = st.text(string.ascii_lowercase, min_size=1, max_size=5)


def plain(value):
    """What a value comes back as: tuples as lists, as in JSON."""
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


@EXAMPLES
@given(segments)
def test_json_like_rows_come_back_exactly(rows):
    assert decode_rows(encode_rows(rows)) == plain(rows)


@EXAMPLES
@given(st.lists(st.floats(), max_size=10))
def test_every_float_comes_back_bit_for_bit(floats):
    back = decode_rows(encode_rows([{"f": f} for f in floats]))
    assert [struct.pack("<d", s["f"]) for s in back] == [struct.pack("<d", f) for f in floats]


def test_subclasses_of_json_like_types_travel_as_their_plain_type():
    class Level(IntEnum):
        HIGH = 3

    rows = [{"level": Level.HIGH, "map": OrderedDict(a=1), "view": memoryview(b"ab")}]
    assert decode_rows(encode_rows(rows)) == [{"level": 3, "map": {"a": 1}, "view": b"ab"}]
    assert type(decode_rows(encode_rows(rows))[0]["level"]) is int


def nest(value, path):
    """``value`` placed at ``path`` (keys) inside dicts."""
    for key in reversed(path):
        value = {key: value}
    return value


unencodable = st.sampled_from(
    [
        ({1, 2}, "value of type set cannot travel"),
        (frozenset(), "value of type frozenset cannot travel"),
        (datetime.datetime(2024, 1, 1), "value of type datetime cannot travel"),
        (uuid.UUID(int=1), "value of type UUID cannot travel"),
        (decimal.Decimal("1.5"), "value of type Decimal cannot travel"),
        (object(), "value of type object cannot travel"),
        (1j, "value of type complex cannot travel"),
        (2**64, "integer 18446744073709551616 does not fit in 64 bits"),
        (-(2**63) - 1, "integer -9223372036854775809 does not fit in 64 bits"),
        ("\udc80", "a string with a lone surrogate cannot travel (it is not UTF-8)"),
    ]
)


@EXAMPLES
@given(st.lists(st.dictionaries(names, scalars, max_size=3), min_size=1, max_size=8),
       st.data(), unencodable, st.lists(names, min_size=1, max_size=4))  # fmt: skip
def test_what_cannot_travel_is_refused_naming_its_segment_and_field(rows, data, bad, path):
    value, reason = bad
    at = data.draw(st.integers(0, len(rows) - 1))
    rows[at] = {**rows[at], **nest(value, path)}
    with pytest.raises(CodecError) as refused:
        encode_rows(rows)
    assert str(refused.value) == f"segment {at}, field {'.'.join(path)!r}: {reason}"


def test_a_bad_value_inside_a_list_is_named_by_its_index():
    with pytest.raises(CodecError, match=r"segment 0, field 'a\[1\].b': value of type set"):
        encode_rows([{"a": [1, {"b": {2}}]}])


def nested(depth):
    value = 0
    for _ in range(depth):
        value = [value]
    return value


def test_nesting_up_to_the_limit_travels_and_deeper_is_refused_both_ways():
    deepest = [nested(MAX_DEPTH - 1)]
    assert decode_rows(encode_rows(deepest)) == deepest
    with pytest.raises(CodecError, match=f"nested in more than {MAX_DEPTH} lists and dicts"):
        encode_rows([nested(MAX_DEPTH)])
    written_elsewhere = b"\x91" * (MAX_DEPTH + 1) + b"\x00"
    with pytest.raises(CodecError, match=f"segment 0, field .*: nested in more than {MAX_DEPTH}"):
        decode_rows(written_elsewhere)


keys = (
    st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False)
    | st.binary(max_size=3)
    | st.none()
)


@EXAMPLES
@given(st.lists(st.dictionaries(names, scalars, max_size=3), min_size=1, max_size=5),
       st.data(), keys, st.lists(names, max_size=6))  # fmt: skip
def test_a_key_that_is_not_a_string_is_refused_on_reading_at_any_depth(rows, data, key, path):
    """Written by another msgpack writer (this one's reader would never take it)."""
    at = data.draw(st.integers(0, len(rows) - 1))
    rows[at] = {**rows[at], **nest({key: 1}, path)} if path else {key: 1}
    with pytest.raises(CodecError, match="dict keys must be strings") as refused:
        decode_rows(msgpack.packb(rows, strict_types=False))
    assert str(refused.value).startswith(f"segment {at}")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (msgpack.packb([{"a": msgpack.ExtType(1, b"")}]), "extension type 1 is not a segment"),
        (msgpack.packb([{"t": msgpack.Timestamp(5, 0)}]), "field 't': a datetime"),
        (msgpack.packb([{"a": [{"b": b"\x00"}, {2: 3}]}]), r"field 'a\[1\]': key 2"),
        (msgpack.packb(5), "body is a int, not a list of segments"),
        (b"\x91\xa1\x80", "body does not decode"),
        (b"", "body does not decode"),
    ],
)
def test_bodies_no_peer_writes_are_refused(body, message):
    with pytest.raises(CodecError, match=message):
        decode_rows(body)


@EXAMPLES
@given(st.binary(max_size=64))
def test_any_bytes_read_as_rows_or_are_refused(junk):
    with contextlib.suppress(CodecError):
        decode_rows(junk)


# -- Arrow ---------------------------------------------------------------------------------------

COLUMNS = {
    pa.int64(): st.integers(-(2**63), 2**63 - 1),
    pa.float64(): st.floats(),
    pa.string(): st.text(max_size=10),
    pa.binary(): st.binary(max_size=10),
    pa.bool_(): st.booleans(),
    pa.list_(pa.int32()): st.lists(st.integers(-(2**31), 2**31 - 1), max_size=3),
    pa.timestamp("us"): st.datetimes(),
}


@st.composite
def record_batches(draw):
    rows = draw(st.integers(0, 30))
    types = draw(st.lists(st.sampled_from(list(COLUMNS)), min_size=1, max_size=5))

    def cells(kind):
        return draw(st.lists(st.none() | COLUMNS[kind], min_size=rows, max_size=rows))

    columns = {f"c{i}": pa.array(cells(t), type=t) for i, t in enumerate(types)}
    batch = pa.RecordBatch.from_pydict(columns)
    offset = draw(st.integers(0, rows))
    return batch.slice(offset, draw(st.integers(0, rows - offset)))


@EXAMPLES
@given(record_batches())
def test_arrow_batches_come_back_exactly(batch):
    back = decode_arrow(encode_arrow(batch))
    assert back.schema == batch.schema
    assert back.num_rows == batch.num_rows
    assert encode_arrow(back) == encode_arrow(batch)
    assert back.equals(batch) or any(
        pa.types.is_floating(f.type) for f in batch.schema
    )  # NaN is unequal to itself


def test_an_arrow_batch_is_read_in_place_from_the_frame_holding_it():
    batch = pa.RecordBatch.from_pydict({"s": ["ab", "cd"] * 100, "n": list(range(200))})
    frame = encode_arrow(batch, prefix=bytes(32))
    start = pa.py_buffer(frame).address
    back = decode_arrow(memoryview(frame)[32:])
    addresses = [b.address for c in back.columns for b in c.buffers() if b is not None]
    assert addresses
    assert all(start <= a < start + len(frame) for a in addresses)
    assert back.equals(batch)


def _stream(*batches, schema=None):
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema or batches[0].schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


SMALL = pa.RecordBatch.from_pydict({"s": ["ab", "cd"]})


def test_an_arrow_body_whose_offsets_point_outside_it_is_refused():
    good = encode_arrow(SMALL)
    offsets = struct.pack("<3i", 0, 2, 4)
    assert good.count(offsets) == 1
    with pytest.raises(CodecError, match="out of bounds"):
        decode_arrow(good.replace(offsets, struct.pack("<3i", 0, 2, 1000)))


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (_stream(SMALL, SMALL), "more than one record batch"),
        (_stream(schema=SMALL.schema), "holds no record batch"),
        (encode_arrow(SMALL)[:-20], "does not read"),
        (encode_arrow(SMALL)[:-1], "does not read"),
        (b"", "does not read"),
    ],
)
def test_arrow_bodies_that_are_not_one_whole_batch_are_refused(body, message):
    with pytest.raises(CodecError, match=message):
        decode_arrow(body)


@EXAMPLES
@given(st.binary(max_size=200))
def test_any_bytes_read_as_arrow_or_are_refused(junk):
    with contextlib.suppress(CodecError):
        decode_arrow(junk)


def test_nan_travels_in_arrow_too():
    back = decode_arrow(encode_arrow(pa.RecordBatch.from_pydict({"f": [math.nan, math.inf]})))
    assert math.isnan(back.column(0)[0].as_py())
    assert back.column(0)[1].as_py() == math.inf
