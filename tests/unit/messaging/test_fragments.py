"""Frames over one transport message: batches split by segment, large segments in fragments,
and the receiver's assembly giving back exactly what was sent, in order, per sender."""

from __future__ import annotations

from collections import deque

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from peer.messaging.fragments import Assembly, fragment, frames
from peer.messaging.frame import HEADER, FrameError, Header, MessageType, decode_header, encode

EXAMPLES = settings(max_examples=150, deadline=None)
LIMIT = 128
"""A transport message of 128 bytes, so small frames already need several."""
MAX = 4096
"""The largest frame in these tests, standing in for MAX_FRAME."""
SEGMENT_MAX = MAX - HEADER.size - 5


def batch(source: int, n: int = 0) -> Header:
    return Header(MessageType.BATCH, 3, source, 9, n, 7)


blobs = st.binary(max_size=SEGMENT_MAX)
segments = st.one_of(
    st.binary(max_size=600),
    st.dictionaries(
        st.text(max_size=5), st.integers(-(2**63), 2**63) | st.text(max_size=300), max_size=4
    ),
)


@EXAMPLES
@given(st.lists(st.tuples(st.integers(1, 3), blobs), max_size=12), st.data())
def test_any_frames_from_interleaved_senders_come_out_whole_and_in_order(sent, data):
    """Each sender's pieces keep their order; how senders interleave is up to hypothesis."""
    queues: dict[int, deque[bytes]] = {}
    for source, blob in sent:
        pieces = frames(batch(source), [blob], LIMIT, MAX)
        assert all(len(p) <= LIMIT for p in pieces)
        queues.setdefault(source, deque()).extend(pieces)
    assembly, received = Assembly(MAX), []
    while any(queues.values()):
        source = data.draw(st.sampled_from(sorted(s for s, q in queues.items() if q)))
        message = assembly.add(queues[source].popleft())
        if message is not None:
            received.append(message)
    for source in {s for s, _ in sent}:
        mine = [(batch(source), [blob]) for s, blob in sent if s == source]
        assert [m for m in received if m[0].source == source] == mine
    assert assembly.held() == 0


@EXAMPLES
@given(st.lists(segments, min_size=1, max_size=30))
def test_a_batch_over_one_message_arrives_as_the_one_batch_it_was(batch_segments):
    pieces = frames(batch(1), batch_segments, LIMIT, MAX)
    assert all(len(p) <= LIMIT for p in pieces)
    assembly = Assembly(MAX)
    messages = [m for m in map(assembly.add, pieces) if m is not None]
    assert messages == [(batch(1), batch_segments)]


def test_a_batch_of_small_segments_travels_in_whole_frames_not_fragments():
    pieces = frames(batch(1), [{"n": n} for n in range(100)], LIMIT, MAX)
    kinds = {decode_header(p).type for p in pieces}
    assert kinds == {MessageType.BATCH}
    assert [decode_header(p).epoch for p in pieces] == list(range(len(pieces) - 1, -1, -1))


def test_a_frame_within_one_message_is_sent_as_it_is():
    assert frames(batch(1), [b"x" * 10], LIMIT, MAX) == [encode(batch(1), [b"x" * 10])]


def test_a_segment_over_the_limit_is_refused_with_its_size():
    with pytest.raises(FrameError, match=r"a segment of 4,095 bytes .* over the 4,059-byte limit"):
        frames(batch(1), [b"x" * (SEGMENT_MAX + 33)], LIMIT, MAX)
    assert frames(batch(1), [b"x" * (SEGMENT_MAX - 3)], LIMIT, MAX)


def test_a_fragment_claiming_a_frame_over_the_limit_is_refused_before_anything_is_held():
    liar = fragment(encode(batch(1), [b"x" * 1000]), LIMIT)[0]
    assembly = Assembly(largest=500)
    with pytest.raises(FrameError, match="over the 500 bytes a frame may have"):
        assembly.add(liar)
    assert assembly.held() == 0


def test_a_fragment_out_of_order_drops_its_frame_and_the_next_frame_is_whole_again():
    first = fragment(encode(batch(1), [b"a" * 1000]), LIMIT)
    assembly = Assembly(MAX)
    assembly.add(first[0])
    with pytest.raises(FrameError, match="does not follow what came before"):
        assembly.add(first[2])
    assert assembly.held() == 0
    again = [assembly.add(p) for p in fragment(encode(batch(1), [b"b" * 300]), LIMIT)]
    assert again[-1] == (batch(1), [b"b" * 300])


def test_what_gone_senders_left_half_sent_is_forgotten():
    assembly = Assembly(MAX)
    assembly.add(fragment(encode(batch(1), [b"a" * 1000]), LIMIT)[0])
    assembly.add(frames(batch(2), [b"p" * 100, b"q" * 100], LIMIT, MAX)[0])
    assert assembly.held() > 0
    assembly.forget(lambda source: source in (1, 2))
    assert assembly.held() == 0
    assert assembly.add(frames(batch(2), [b"r"], LIMIT, MAX)[0]) == (batch(2), [b"r"])
