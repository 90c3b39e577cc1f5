"""The message table: every kind of message becomes frames and comes back as itself, through
fragments too, and frames of the wrong shape are refused."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from peer.messaging import messages
from peer.messaging.fragments import Assembly
from peer.messaging.frame import BodyError, FrameError, Header, MessageType, Packed, encode, pack
from peer.messaging.messages import (
    DRAINED,
    END,
    RECALL,
    RESTORE_SCOPES,
    TABLE,
    Ack,
    Address,
    Barrier,
    Batch,
    Committed,
    Credit,
    Determinants,
    Drained,
    End,
    JoinAsk,
    JoinReply,
    LogRumor,
    Membership,
    Recall,
    Recalled,
    Recover,
    ReplayFrom,
    RestorePoint,
    Watermark,
)

EXAMPLES = settings(max_examples=150, deadline=None)

u32 = st.integers(0, 2**32 - 1)
u64 = st.integers(0, 2**64 - 1)
addresses = st.builds(Address, u32, u32, u32, u64)
rows = st.lists(
    st.dictionaries(st.text(max_size=5), st.integers(-5, 5) | st.text(max_size=40), max_size=4),
    max_size=40,
)


@st.composite
def arrow_batches(draw):
    n = draw(st.integers(0, 60))
    return pa.RecordBatch.from_pydict(
        {"n": list(range(n)), "s": [draw(st.text(max_size=30)) for _ in range(n)]}
    )


every_message = st.one_of(
    st.builds(Batch, rows),
    st.builds(Batch, arrow_batches()),
    st.builds(Barrier, u64, st.booleans()),
    st.builds(Watermark, st.floats(allow_nan=False) | st.integers(-(2**63), 2**63)),
    st.just(END),
    st.builds(Credit, u64),
    st.builds(
        Recover,
        st.none()
        | st.builds(
            RestorePoint,
            st.text(),
            u64,
            u64,
            st.dictionaries(st.text(), u64),
            st.sampled_from(RESTORE_SCOPES),
            st.dictionaries(st.text(), u64),
        ),
    ),
    st.builds(Ack, u64),
    st.just(DRAINED),
    st.builds(Committed, u64),
    st.builds(JoinAsk, st.just(["g1", ["p1"], "127.0.0.1:1", [], "127.0.0.1:1"])),
    st.builds(JoinReply, st.just(["g1", "g2", True, None, False, b"\x00" * 3_000_000])),
    st.builds(Membership, st.lists(st.text(max_size=30), max_size=4)),
    st.builds(LogRumor, st.binary(max_size=300)),
)


def same(a, b):
    if isinstance(a, Batch) and isinstance(a.batch, pa.RecordBatch):
        return isinstance(b, Batch) and b.batch.equals(a.batch)
    return a == b


@EXAMPLES
@given(addresses, every_message, st.sampled_from([128, 1024, 2**21]))
def test_every_message_comes_back_as_itself_whatever_the_limit(address, message, limit):
    frames = messages.encode(address, message, limit)
    assert all(len(f) <= limit for f in frames)
    assembly = Assembly()
    whole = [w for w in map(assembly.add, frames) if w is not None]
    assert len(whole) == 1
    header, body = whole[0]
    assert messages.address_of(header) == address
    assert same(messages.read(header, body), message)


def test_the_table_has_one_row_per_message_kind_and_frame_type():
    kinds = {Batch, Barrier, Watermark, End, Credit, Recover, Ack, Drained, Committed, Membership}
    kinds |= {JoinAsk, JoinReply}
    kinds |= {LogRumor}
    kinds |= {Determinants, ReplayFrom, Recall, Recalled}
    assert {row.message for row in TABLE} == kinds
    assert {row.type for row in TABLE} == set(MessageType) - {MessageType.FRAGMENT}


@pytest.mark.parametrize(
    ("message", "kind", "epoch"),
    [
        (Batch([{"a": 1}]), MessageType.BATCH, 0),
        (Barrier(7, final=True), MessageType.BARRIER, 7),
        (Barrier(8, pause=True), MessageType.BARRIER, 8),
        (Credit(5), MessageType.CREDIT, 5),
        (Credit(3, rows=250), MessageType.CREDIT, 3),
        (Ack(9), MessageType.ACK, 9),
        (Committed(4), MessageType.COMMITTED, 4),
        (END, MessageType.END, 0),
        (ReplayFrom(3), MessageType.REPLAY, 3),
        (RECALL, MessageType.RECALL, 0),
        (Recalled(4, 2, [[0, [[1, 1]]], [1, 5.0]]), MessageType.RECALLED, 0),
        (Determinants([[1, 0, 1, [[4, 2]]]]), MessageType.DETERMINANTS, 0),
    ],
)
def test_a_message_that_fits_is_one_frame_whose_header_says_what_it_is(message, kind, epoch):
    [frame] = messages.encode(Address(1, 2, 3, 4), message, 2**21)
    header, back = messages.decode(frame)
    assert header == Header(kind, 4, 2, 3, epoch, 1)
    assert back == message


ADDRESS = Header(MessageType.END, 4, 2, 3, 0, 1)


@pytest.mark.parametrize(
    ("kind", "body", "message"),
    [
        (MessageType.BARRIER, [], r"a BARRIER frame: body \[\] is not \[final, pause\]"),
        (MessageType.BARRIER, [1], r"is not \[final, pause\] as booleans"),
        (MessageType.BARRIER, [True, False, True], r"is not \[final, pause\]"),
        (MessageType.WATERMARK, ["late"], "is not one"),
        (MessageType.WATERMARK, [1.0, 2.0], "is not one"),
        (MessageType.MEMBERSHIP, pa.RecordBatch.from_pydict({"a": [1]}), "is not a list"),
        (MessageType.RECOVER, pa.RecordBatch.from_pydict({"a": [1]}), "is not a list"),
        (MessageType.RECOVER, ["j", 1, 2], r"is not \[job, version, epoch, slots, scope, groups\]"),
        (MessageType.RECOVER, ["j", -1, 2, {}], "a job id and two ints >= 0"),
        (MessageType.RECOVER, ["j", 1, 2, {"t": "two"}], r"slots \{'t': 'two'\} are not"),
        (MessageType.RECOVER, ["j", 1, 2, {}, "partial"], "scope 'partial' is not one of"),
        (MessageType.RECALLED, [1, 2], r"is not \[received, offset, events\]"),
        (MessageType.RECALLED, [1, -2, []], r"is not \[received, offset, events\]"),
        (MessageType.CREDIT, [-1], "row limit -1 is not an int >= 0"),
        (MessageType.CREDIT, [True], "row limit True is not an int >= 0"),
        (MessageType.CREDIT, ["many"], "is not one"),
        (MessageType.FRAGMENT, [], "a FRAGMENT frame is not a message"),
    ],
)
def test_frames_of_the_wrong_shape_are_refused_saying_whose_they_were(kind, body, message):
    header = ADDRESS._replace(type=kind)
    with pytest.raises(BodyError, match=message) as refused:
        messages.decode(encode(header, body))
    assert refused.value.header == header


def test_a_batch_that_cannot_travel_names_its_segment_and_field():
    with pytest.raises(FrameError, match="segment 1, field 'a': value of type set"):
        messages.encode(Address(1, 2, 3, 4), Batch([{"a": 1}, {"a": {2}}]), 2**21)


def test_another_message_that_cannot_travel_names_its_kind():
    with pytest.raises(FrameError, match=r"a Watermark message cannot travel: .*type object"):
        messages.encode(Address(1, 2, 3, 4), Watermark(object()), 2**21)


def test_what_is_not_a_message_is_refused():
    with pytest.raises(TypeError, match="a list is not a message"):
        messages.encode(Address(1, 2, 3, 4), [{"a": 1}], 2**21)


def test_a_recover_of_an_earlier_release_without_a_scope_restores_globally():
    header = ADDRESS._replace(type=MessageType.RECOVER)
    _, told = messages.decode(encode(header, ["j", 7, 3, {"t": 2}]))
    assert told == Recover(RestorePoint("j", 7, 3, {"t": 2}, "global"))


def test_a_recover_of_an_earlier_release_without_key_groups_names_none():
    header = ADDRESS._replace(type=MessageType.RECOVER)
    _, told = messages.decode(encode(header, ["j", 7, 3, {"t": 2}, "handover"]))
    assert told == Recover(RestorePoint("j", 7, 3, {"t": 2}, "handover", {}))


def test_a_recover_with_key_groups_that_are_not_counts_is_refused():
    header = ADDRESS._replace(type=MessageType.RECOVER)
    with pytest.raises(BodyError, match=r"groups \{'t': -1\} are not \{task: count\}"):
        messages.decode(encode(header, ["j", 7, 3, {"t": 2}, "global", {"t": -1}]))


def test_a_large_arrow_batch_crosses_in_parts_and_arrives_as_one_batch():
    batch = pa.RecordBatch.from_pydict({"n": list(range(5000)), "s": ["x" * 50] * 5000})
    frames = messages.encode(Address(1, 2, 3, 4), Batch(batch), 16 * 1024)
    assert len(frames) > 10
    assert all(len(f) <= 16 * 1024 for f in frames)
    assembly = Assembly()
    [(_header, body)] = [w for w in map(assembly.add, frames) if w is not None]
    assert body.equals(batch)


@EXAMPLES
@given(addresses, rows.filter(bool), st.sampled_from([128, 1024, 2**21]))
def test_rows_packed_once_travel_as_the_frames_of_the_rows(address, batch, limit):
    """A sender that keeps its batches packs them as they are made: what it sends is the very
    frames it would have sent of the rows, and a peer of its own process gets the rows back."""
    held = pack(batch, limit)
    if isinstance(held, Packed):
        assert messages.encode(address, Batch(held), limit) == [
            messages.encode(address, Batch(batch), limit)[0]
        ]
    else:
        assert held is batch, "rows whose frame is over the limit stay rows, to go in parts"
        assert len(messages.encode(address, Batch(batch), limit)) > 1
    assert messages.in_process(Batch(held)) == Batch(batch)


def test_a_packed_batch_over_the_limit_still_arrives_as_the_one_batch_it_was():
    batch = [{"n": n, "s": "x" * 50} for n in range(40)]
    frames = messages.encode(Address(1, 2, 3, 4), Batch(pack(batch, 2**21)), 1024)
    assembly = Assembly()
    whole = [w for w in map(assembly.add, frames) if w is not None]
    assert len(frames) > 1
    assert messages.read(*whole[0]) == Batch(batch)


def test_rows_that_cannot_travel_are_refused_when_packed_naming_segment_and_field():
    with pytest.raises(FrameError, match="segment 1, field 'x': value of type object"):
        pack([{"fine": 1}, {"x": object()}], 2**21)


def test_an_arrow_batch_is_kept_as_it_is():
    batch = pa.RecordBatch.from_pydict({"n": [1, 2]})
    assert pack(batch, 2**21) is batch
    assert messages.in_process(Batch(batch)).batch is batch
