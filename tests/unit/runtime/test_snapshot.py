"""A task's snapshot as stored: the map the engine has always written, read back into typed
values, and bytes that are not a snapshot refused with the field named."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from peer.runtime.snapshot import SeatState, SnapshotError, TaskSnapshot

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
)


SNAPSHOT = st.builds(TaskSnapshot, STATE, STATE, STATE, st.booleans(), st.none() | SEAT,
                     st.lists(st.lists(STATE, min_size=1, max_size=2), max_size=2))  # fmt: skip


@given(SNAPSHOT)
def test_a_snapshot_reads_back_as_it_was_taken(snapshot: TaskSnapshot) -> None:
    assert TaskSnapshot.from_bytes(snapshot.to_bytes()) == snapshot


def test_it_is_stored_as_the_map_the_engine_has_always_written() -> None:
    """Snapshots and savepoints taken before the typed values read back."""
    seat = {"offset": 7, "sent": {1: 3}, "received": {0: 2}, "turn": 1, "timers": [[1.5]]}
    old = {"plugin": {"offset": 3}, "windows": None, "fn": {"k": 1}, "ended": False,
           "causal": seat, "channel": [[{"n": 1}]]}  # fmt: skip
    read = TaskSnapshot.from_bytes(msgpack.packb(old))
    assert read == TaskSnapshot({"offset": 3}, None, {"k": 1}, False,
                                SeatState(7, {1: 3}, {0: 2}, 1, [[1.5]]), [[{"n": 1}]])  # fmt: skip
    assert msgpack.unpackb(read.to_bytes(), strict_map_key=False) == old
    plain = {"plugin": None, "windows": None, "fn": None, "ended": True}
    assert msgpack.unpackb(TaskSnapshot(None, None, None, True).to_bytes()) == plain


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
    ],
)  # fmt: skip
def test_bytes_that_are_not_a_snapshot_are_refused_naming_the_field(doc, says) -> None:
    with pytest.raises(SnapshotError, match=says):
        TaskSnapshot.from_bytes(msgpack.packb(doc))


def test_bytes_that_are_not_msgpack_are_refused() -> None:
    with pytest.raises(SnapshotError, match="does not read as msgpack"):
        TaskSnapshot.from_bytes(b"\xc1")
