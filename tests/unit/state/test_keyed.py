"""Keyed state against a plain dict model: any sequence of writes, snapshots and restores onto
any number of slots reads back as the model does; a TTL forgets exactly the entries not written
for that long."""

from __future__ import annotations

import math
from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from peer.state import KeyedState, Ttl
from peer.state.key_groups import groups_of
from peer.state.keyed import StateError

GROUPS = 16
KEYS = st.sampled_from(["a", "b", "c", 1, 2, [1, "x"], None])
VALUES = st.integers(-5, 5) | st.text(max_size=3)


def opened(groups: int = GROUPS, ttl: Ttl | None = None) -> tuple[KeyedState, dict[str, Any]]:
    state = KeyedState(groups)
    handles = {
        "value": state.value_state("v", default=0, ttl=ttl),
        "map": state.map_state("m", ttl=ttl),
        "list": state.list_state("l", ttl=ttl),
    }
    return state, handles


def packed(snapshot: dict[int, Any]) -> dict[int, Any]:
    """A snapshot as storage gives it back."""
    return msgpack.unpackb(msgpack.packb(snapshot), strict_map_key=False)


ops = st.lists(
    st.tuples(
        st.sampled_from(["set", "clear", "put", "remove", "add", "drop"]), KEYS, VALUES, VALUES
    ),
    max_size=40,
)


def apply(handles: dict[str, Any], state: KeyedState, model: dict, op: tuple) -> None:
    kind, key, x, y = op
    state.at(key)
    slot = model.setdefault(repr(key), {"v": 0, "m": {}, "l": []})
    if kind == "set":
        handles["value"].set(x)
        slot["v"] = x
    elif kind == "clear":
        handles["value"].clear()
        slot["v"] = 0
    elif kind == "put":
        handles["map"].put(x, y)
        slot["m"][x] = y
    elif kind == "remove":
        handles["map"].remove(x)
        slot["m"].pop(x, None)
    elif kind == "add":
        handles["list"].add(x)
        slot["l"].append(x)
    else:
        handles["list"].clear()
        slot["l"] = []


def read(handles: dict[str, Any], state: KeyedState, key: Any) -> dict[str, Any]:
    state.at(key)
    return {"v": handles["value"].get(), "m": dict(handles["map"].items()),
            "l": handles["list"].get()}  # fmt: skip


def every_key(handles: dict[str, Any], state: KeyedState) -> dict[str, Any]:
    keys = ["a", "b", "c", 1, 2, [1, "x"], None]
    return {repr(k): read(handles, state, k) for k in keys}


def blank() -> dict[str, Any]:
    return {"v": 0, "m": {}, "l": []}


@given(ops, ops, st.integers(1, 5), st.integers(1, 5))
def test_state_restored_onto_any_slots_reads_as_the_model(first, second, before, after):
    """Written on ``before`` slots, each key on the slot owning its group, restored onto
    ``after`` slots from every old slot's snapshot, then written again: as the model."""
    model: dict = {}
    old = [opened() for _ in range(before)]
    for op in first:
        state, handles = old[_owner(op[1], before)]
        apply(handles, state, model, op)
    snapshots = [packed(state.snapshot()) for state, _ in old]
    new = []
    for slot in range(after):
        state, handles = opened()
        owned = groups_of(slot, after, GROUPS)
        state.restore(snapshots, owned.__contains__)
        new.append((state, handles))
    for op in second:
        state, handles = new[_owner(op[1], after)]
        apply(handles, state, model, op)
    for key in ["a", "b", "c", 1, 2, [1, "x"], None]:
        state, handles = new[_owner(key, after)]
        assert read(handles, state, key) == model.get(repr(key), blank())


@given(ops)
def test_a_key_groups_snapshot_holds_only_that_groups_keys(steps):
    state, handles = opened()
    for op in steps:
        apply(handles, state, {}, op)
    for group, states in state.snapshot().items():
        for entries in states.values():
            probe = KeyedState(GROUPS)
            for key, _value, _expires in entries:
                probe.at(key)
                assert probe.groups == {group: {}}
                probe.groups.clear()


def _owner(key: Any, slots: int) -> int:
    probe = KeyedState(GROUPS)
    probe.at(key)
    (group,) = probe.groups
    return next(s for s in range(slots) if group in groups_of(s, slots, GROUPS))


@given(st.lists(st.tuples(KEYS, st.integers(0, 30)), max_size=20), st.integers(0, 60))
def test_a_ttl_forgets_exactly_what_was_not_written_for_that_long(writes, later):
    """Entries written at processing time t live until t + 10: at ``later`` each key reads its
    last write if that was after ``later - 10``, else as never written; a snapshot keeps the
    same."""
    state, handles = opened(ttl=Ttl(10))
    last: dict[str, tuple[int, int]] = {}
    for n, (key, at) in enumerate(sorted(writes, key=lambda w: w[1])):
        state.tick(at, -math.inf)
        state.at(key)
        handles["value"].set(n)
        handles["map"].put("k", n)
        last[repr(key)] = (n, at)
    state.tick(later, -math.inf)
    for key in ["a", "b", "c", 1, 2, [1, "x"], None]:
        seen = read(handles, state, key)
        n, at = last.get(repr(key), (None, -100))
        alive = at + 10 > later
        assert seen["v"] == (n if alive else 0)
        assert seen["m"] == ({"k": n} if alive else {})
    kept = {repr(e[0]) for states in state.snapshot().values() for e in states.get("v", [])}
    assert kept == {k for k, (_, at) in last.items() if at + 10 > later}


def test_event_time_ttl_follows_the_watermark():
    state = KeyedState(GROUPS)
    seen = state.value_state("seen", ttl=Ttl(5, "event"))
    state.tick(0.0, 100.0)
    state.at("k")
    seen.set(True)
    state.tick(10_000.0, 104.0)
    assert seen.get() is True
    state.tick(0.0, 105.0)
    assert seen.get() is None


@pytest.mark.parametrize(
    ("ask", "message"),
    [
        (lambda s: s.value_state(""), "a state's name must be a non-empty string, got ''"),
        (lambda s: s.value_state("x", ttl=5), "state 'x': ttl must be a Ttl, got 5"),
        (lambda s: (s.value_state("x"), s.map_state("x")), "state 'x' is asked for twice"),
        (lambda s: Ttl(0), "ttl seconds must be a number > 0, got 0"),
        (lambda s: Ttl(1, "wall"), "ttl time must be one of processing, event, got 'wall'"),
    ],
)
def test_a_state_asked_for_wrongly_is_refused_naming_it(ask, message):
    with pytest.raises(StateError) as refused:
        ask(KeyedState(GROUPS))
    assert str(refused.value) == message


def test_a_state_no_longer_asked_for_is_dropped_at_restore():
    state = KeyedState(GROUPS)
    old, kept = state.value_state("old"), state.value_state("kept")
    state.at("k")
    old.set(2)
    kept.set(1)
    again = KeyedState(GROUPS)
    kept_again = again.value_state("kept")
    again.restore([packed(state.snapshot())], lambda group: True)
    again.at("k")
    assert kept_again.get() == 1
    assert all(set(states) == {"kept"} for states in again.groups.values())


def test_the_times_a_state_expires_in_are_known_once_it_is_asked_for():
    state = KeyedState(GROUPS)
    state.value_state("plain")
    assert not state.expires_in("processing")
    assert not state.expires_in("event")
    state.map_state("recent", ttl=Ttl(60))
    assert state.expires_in("processing")
    assert not state.expires_in("event")
