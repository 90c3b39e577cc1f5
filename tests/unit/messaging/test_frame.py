"""The wire format: frames round-trip exactly, and whatever is not a frame is refused clearly."""

from __future__ import annotations

import contextlib
import math

import msgpack
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from peer.messaging.frame import (
    FORMAT_VERSION,
    HEADER,
    BodyError,
    FrameError,
    Header,
    MessageType,
    decode,
    decode_header,
    encode,
)

EXAMPLES = settings(max_examples=200, deadline=None)

u32 = st.integers(0, 2**32 - 1)
u64 = st.integers(0, 2**64 - 1)
headers = st.builds(Header, st.sampled_from(MessageType), u64, u32, u32, u64, u32)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text()
    | st.binary(max_size=8)
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=20,
)
segment_lists = st.lists(st.dictionaries(st.text(), values, max_size=6), max_size=20)
small_segments = st.lists(st.dictionaries(st.text(max_size=4), scalars, max_size=3), max_size=3)

SAMPLE = Header(MessageType.BATCH, allocation_version=7, source=1, destination=2, epoch=3, job=4)


@EXAMPLES
@given(headers, segment_lists)
def test_frames_round_trip(header, segments):
    assert decode(encode(header, segments)) == (header, segments)


@EXAMPLES
@given(headers, small_segments)
def test_the_header_reads_alone(header, segments):
    frame = encode(header, segments)
    assert decode_header(frame) == header
    assert decode_header(frame[: HEADER.size]) == header
    assert decode_header(memoryview(frame)) == header


@EXAMPLES
@given(st.binary(max_size=64))
def test_any_bytes_decode_or_raise_frame_error(junk):
    for frame in (junk, encode(SAMPLE)[: HEADER.size] + junk):
        with contextlib.suppress(FrameError):
            decode(frame)


def test_the_wire_layout_is_fixed():
    """Peers of different builds read each other's frames only while this holds."""
    frame = encode(SAMPLE, [{"a": 1}])
    assert frame.hex() == (
        "03010000" "04000000" "01000000" "02000000" "0700000000000000" "0300000000000000"
        "9181a16101"
    )  # fmt: skip


def test_an_arrow_batch_says_so_in_the_third_byte_and_comes_back_equal():
    batch = pa.RecordBatch.from_pydict({"n": [1, 2, None], "s": ["a", "b", "c"]})
    frame = encode(SAMPLE, batch)
    assert frame[:3] == bytes([FORMAT_VERSION, MessageType.BATCH, 1])
    header, body = decode(frame)
    assert header == SAMPLE
    assert isinstance(body, pa.RecordBatch)
    assert body.equals(batch)


def test_non_finite_floats_and_negative_zero_round_trip():
    [segment] = decode(encode(SAMPLE, [{"nan": math.nan, "inf": math.inf, "-inf": -math.inf,
                                        "zero": -0.0}]))[1]  # fmt: skip
    assert math.isnan(segment["nan"])
    assert segment["inf"] == math.inf
    assert segment["-inf"] == -math.inf
    assert math.copysign(1, segment["zero"]) == -1


def test_tuples_come_back_as_lists_and_bytes_as_bytes():
    segments = ({"pair": (1, 2), "blob": b"\x00\xff"},)
    assert decode(encode(SAMPLE, segments))[1] == [{"pair": [1, 2], "blob": b"\x00\xff"}]


def test_frames_without_a_body():
    done = Header(MessageType.END, 1, 2, 3, 4, 5)
    assert decode(encode(done)) == (done, [])


def test_decode_reads_memoryviews_and_bytearrays():
    frame = encode(SAMPLE, [{"a": 1}])
    assert decode(memoryview(frame)) == decode(bytearray(frame)) == (SAMPLE, [{"a": 1}])


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (b"", "empty frame"),
        (
            bytes([FORMAT_VERSION + 1]) + bytes(40),
            f"unknown frame format version {FORMAT_VERSION + 1} ",
        ),
        (bytes([2]) + bytes(40), "unknown frame format version 2 "),
        (bytes([FORMAT_VERSION, 1, 0]), "3 bytes is shorter than the 32 byte header"),
        (HEADER.pack(FORMAT_VERSION, 99, 0, 0, 0, 0, 0, 0), "unknown message type 99"),
        (HEADER.pack(FORMAT_VERSION, 0, 0, 0, 0, 0, 0, 0), "unknown message type 0"),
    ],
)
def test_unreadable_headers_are_refused(frame, message):
    with pytest.raises(FrameError, match=message):
        decode_header(frame)
    with pytest.raises(FrameError, match=message):
        decode(frame)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "body does not decode"),
        (b"\x92\x01", "body does not decode"),
        (b"\x91\x01\x02", "body does not decode"),
        (b"\xc1", "body does not decode"),
        (msgpack.packb({"a": 1}), "body is a dict, not a list"),
        (msgpack.packb([{1: 2}]), "segment 0: key 1 of type int: dict keys must be strings"),
        (msgpack.packb([msgpack.ExtType(5, b"x")]), "extension type 5"),
        (
            msgpack.packb([msgpack.Timestamp(1, 5)]),
            r"segment 0: a datetime \(a msgpack extension\)",
        ),
        (b"\x91" * 5000 + b"\xc0", "nested in more than 1024"),
    ],
)
def test_unreadable_bodies_are_refused_saying_whose_frame_it_was(body, message):
    frame = encode(SAMPLE)[: HEADER.size] + body
    assert decode_header(frame) == SAMPLE
    with pytest.raises(BodyError, match=message) as refused:
        decode(frame)
    assert refused.value.header == SAMPLE


def test_a_body_of_an_unknown_format_is_refused():
    frame = bytearray(encode(SAMPLE, [{"a": 1}]))
    frame[2] = 7
    with pytest.raises(BodyError, match="unknown body format 7"):
        decode(bytes(frame))


@pytest.mark.parametrize(
    ("header", "message"),
    [
        (Header(MessageType.BATCH, -1, 0, 0, 0, 0), "allocation_version -1 is not an unsigned 64"),
        (Header(MessageType.BATCH, 0, 2**32, 0, 0, 0), "source 4294967296 is not an unsigned 32"),
        (Header(MessageType.BATCH, 0, 0, 0, 0, "j"), "job 'j' is not an unsigned 32"),
        (Header(99, 0, 0, 0, 0, 0), "header type 99 is not a MessageType"),
    ],
)
def test_headers_that_do_not_fit_are_refused(header, message):
    with pytest.raises(FrameError, match=message):
        encode(header)


@pytest.mark.parametrize(
    ("segment", "message"),
    [
        ({"x": object()}, "segment 1, field 'x': value of type object cannot travel"),
        ({"big": 2**64}, "segment 1, field 'big': integer 18446744073709551616 does not fit"),
        ({"bad": "\ud800"}, "segment 1, field 'bad': a string with a lone surrogate"),
        ({"a": {"b": {1, 2}}}, "segment 1, field 'a.b': value of type set cannot travel"),
    ],
)
def test_segments_that_cannot_travel_are_refused_naming_the_field(segment, message):
    with pytest.raises(FrameError, match=message):
        encode(SAMPLE, [{"fine": 1}, segment])
