"""A task's snapshot as stored: its keyed state's parts per key group and a header after them,
read back into typed values (as are the layouts the engine wrote before), bytes that are not a
snapshot refused with the field named; and the chain policy, which keeps a restore's reading
bounded."""

from __future__ import annotations

import struct

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from peer.runtime.snapshot import (
    HEAD,
    MAX_CHAIN,
    TAIL,
    Chain,
    SeatState,
    SnapshotError,
    TaskSnapshot,
    header_end,
    header_start,
    read,
    read_footer,
    read_header,
)
from tests.support import header_first

STATE = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=8,
)
SEAT = st.builds(
    SeatState,
    st.integers(0, 1000),
    st.dictionaries(st.integers(0, 50), st.integers(0, 10**6), max_size=3),
    st.dictionaries(st.integers(0, 50), st.integers(0, 10**6), max_size=3),
    st.integers(0, 50),
    st.lists(st.lists(st.floats(allow_nan=False), max_size=2), max_size=2),
    st.none() | st.floats(allow_nan=False),
    st.dictionaries(st.integers(0, 50), st.floats(allow_nan=False), max_size=3),
)


SNAPSHOT = st.builds(TaskSnapshot, STATE, STATE, STATE, st.booleans(), st.none() | SEAT,
                     st.lists(st.lists(STATE, min_size=1, max_size=2), max_size=2),
                     st.lists(st.integers(1, 99), max_size=3).map(tuple))  # fmt: skip
PARTS = st.dictionaries(st.integers(0, 127), st.binary(max_size=20), max_size=6)


@given(SNAPSHOT, PARTS)
def test_a_snapshot_reads_back_as_it_was_taken(snapshot: TaskSnapshot, parts) -> None:
    assert read(snapshot.to_bytes(parts)) == (snapshot, parts)


@given(SNAPSHOT, PARTS, st.integers(0, 127), st.integers(0, 128), st.integers(TAIL, 200))
def test_its_tail_tells_where_each_key_groups_part_lies(snapshot, parts, low, high, tail) -> None:
    """What a restore reading some key groups does: the tail, holding the header, then one
    range."""
    blob = snapshot.to_bytes(parts)
    start = header_start(blob[-tail:], len(blob))
    assert start is not None
    header = read_footer(blob[start:-TAIL], start)
    assert header.snapshot == snapshot
    wanted = [(g, span) for g, span in header.parts.items() if low <= g < high]
    assert {g: blob[a:b] for g, (a, b) in wanted} == {
        g: part for g, part in parts.items() if low <= g < high
    }
    assert [g for g, _ in wanted] == sorted(g for g in parts if low <= g < high)
    if wanted:
        assert blob[wanted[0][1][0] : wanted[-1][1][1]] == b"".join(parts[g] for g, _ in wanted)


@given(SNAPSHOT, PARTS)
def test_its_chunks_are_its_parts_as_they_come_then_its_header(snapshot, parts) -> None:
    """What lets a snapshot be written as its keyed state is packed: each part is a chunk of
    its own, written before anything that depends on all of them."""
    ordered = sorted(parts.items())
    chunks = list(snapshot.chunks(iter(ordered)))
    assert chunks[1:-1] == [part for _, part in ordered]
    assert b"".join(chunks) == snapshot.to_bytes(parts)


@given(SNAPSHOT.map(lambda s: TaskSnapshot(s.plugin, s.windows, s.fn, s.ended, chain=s.chain)),
       PARTS)  # fmt: skip
def test_a_snapshot_stored_with_its_header_first_reads_back(snapshot, parts) -> None:
    blob = header_first(snapshot, parts)
    assert read(blob) == (snapshot, parts)
    header = read_header(blob[: header_end(blob[:HEAD])], len(blob))
    assert {g: blob[a:b] for g, (a, b) in header.parts.items()} == parts


def test_a_snapshot_stored_as_the_map_the_engine_wrote_before_reads_back() -> None:
    """Snapshots and savepoints taken before this layout read back, keyed state included."""
    seat = {"offset": 7, "sent": {1: 3}, "received": {0: 2}, "turn": 1, "timers": [[1.5]]}
    state = {4: {"count": [["a", 1, 9.0]]}}
    old = {"plugin": {"offset": 3}, "windows": None, "fn": {"k": 1}, "ended": False,
           "causal": seat, "channel": [[{"n": 1}]], "state": state}  # fmt: skip
    snapshot, parts = read(msgpack.packb(old))
    seat_state = SeatState(7, {1: 3}, {0: 2}, 1, [[1.5]])
    assert snapshot == TaskSnapshot({"offset": 3}, None, {"k": 1}, False, seat_state, [[{"n": 1}]])
    assert {g: msgpack.unpackb(p) for g, p in parts.items()} == state


def test_a_chain_is_whole_first_then_changes_until_their_bytes_reach_the_whole_one_s() -> None:
    chain = Chain()
    assert chain.whole(), "the first after a start is whole"
    assert chain.taken(1, whole=True, size=100) == ()
    assert not chain.whole()
    assert chain.taken(2, whole=False, size=40) == (1,)
    assert not chain.whole()
    assert chain.taken(3, whole=False, size=40) == (1, 2)
    assert chain.since == 1
    assert not chain.whole(), "80 bytes of changes, less than the whole 100"
    assert chain.taken(4, whole=False, size=20) == (1, 2, 3)
    assert chain.whole(), "a restore would read more than twice the whole"
    assert chain.taken(5, whole=True, size=120) == ()
    assert chain.since == 5


def test_a_chain_is_never_longer_than_max_chain() -> None:
    chain = Chain()
    number = 1
    chain.taken(number, whole=True, size=10**9)
    while not chain.whole():
        number += 1
        chain.taken(number, whole=False, size=1)
    assert number == MAX_CHAIN


@pytest.mark.parametrize(
    ("doc", "says"),
    [
        ([1, 2], "it holds a list, not a map"),
        ({"plugin": None, "fn": None}, "it has no windows"),
        ({"plugin": None, "windows": None, "fn": None, "ended": 1}, "its ended is a int"),
        ({"plugin": None, "windows": None, "fn": None, "channel": {}}, "its channel is a dict"),
        ({"plugin": None, "windows": None, "fn": None, "causal": []}, "its causal state is a list"),
        ({"plugin": None, "windows": None, "fn": None, "causal": {"offset": 1}},
         "its causal state has no sent"),
        ({"plugin": None, "windows": None, "fn": None,
          "causal": {"offset": "1", "sent": {}, "received": {}, "turn": 0, "timers": []}},
         "its causal offset is a str"),
        ({"plugin": None, "windows": None, "fn": None,
          "causal": {"offset": 1, "sent": {"a": 1}, "received": {}, "turn": 0, "timers": []}},
         "its causal sent is not a map of seats to counts"),
        ({"plugin": None, "windows": None, "fn": None,
          "causal": {"offset": 1, "sent": {}, "received": {}, "turn": 0, "timers": [],
                     "watermark": "9"}},
         "its causal watermark is a str"),
        ({"plugin": None, "windows": None, "fn": None,
          "causal": {"offset": 1, "sent": {}, "received": {}, "turn": 0, "timers": [],
                     "watermarks": {1: True}}},
         "its causal watermarks are not a map of seats to numbers"),
    ],
)  # fmt: skip
def test_bytes_that_are_not_a_snapshot_are_refused_naming_the_field(doc, says) -> None:
    with pytest.raises(SnapshotError, match=says):
        read(msgpack.packb(doc))


LISTS_2 = msgpack.packb({"plugin": None, "windows": None, "fn": None, "parts": [[3, 2]]})
"""A header listing a part of 2 bytes, where 3 lie before it."""


@pytest.mark.parametrize(
    ("blob", "says"),
    [
        (b"\x92", "does not read as msgpack"),
        (b"\xc1SN2\x00", "inside its header's length"),
        (b"\xc1SN2\x00\x00\x00\x09\x80", "cut short"),
        (header_first(TaskSnapshot(None, None, None, False), {3: b"abc"})[:-1], "parts end at"),
        (TaskSnapshot(None, None, None, False).to_bytes({3: b"abc"})[:-1], "cut short"),
        (b"\xc1SN3\x00\x00\x00\x09\xc1SN3", "reaches past its start"),
        (b"\xc1SN3\xc1SN3", "inside its header's length"),
        (
            b"\xc1SN3abc" + LISTS_2 + struct.pack(">I", len(LISTS_2)) + b"\xc1SN3",
            "parts end at byte 6, and its header starts at 7",
        ),
    ],
)
def test_bytes_that_are_not_a_stored_snapshot_are_refused(blob, says) -> None:
    with pytest.raises(SnapshotError, match=says):
        read(blob)


def test_a_whole_snapshot_measured_once_stored_bounds_its_chain_from_then_on() -> None:
    """A whole snapshot packed as it is stored has no size when taken: its chain goes on until
    it is measured, and is then bounded by it as any other."""
    chain = Chain()
    assert chain.taken(1, whole=True, size=None) == ()
    assert chain.taken(2, whole=False, size=500) == (1,)
    assert not chain.whole(), "not measured yet"
    chain.measured(2, 10)
    assert not chain.whole(), "only the chain's whole snapshot measures it"
    chain.measured(1, 400)
    assert chain.whole(), "500 bytes of changes, more than the whole 400"
