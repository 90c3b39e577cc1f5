"""Keyed state against a plain dict model: any sequence of writes, snapshots (whole, or of what
changed) and restores onto any number of slots reads back as the model does, and a chain of
snapshots restores what a whole one does; a TTL forgets exactly the entries not written for
that long."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any
from unittest.mock import patch

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from peer.job.values import canonical
from peer.state import KeyedState, Ttl
from peer.state import keyed as keyed_module
from peer.state.backends import Backend, DiskBackend
from peer.state.key_groups import groups_of
from peer.state.keyed import Parts, StateError

GROUPS = 16
KEYS = st.sampled_from(["a", "b", "c", 1, 2, [1, "x"], None])
VALUES = st.integers(-5, 5) | st.text(max_size=3)


def opened(
    groups: int = GROUPS, ttl: Ttl | None = None, backend: Backend | None = None
) -> tuple[KeyedState, dict[str, Any]]:
    state = KeyedState(groups, backend)
    handles = {
        "value": state.value_state("v", default=0, ttl=ttl),
        "map": state.map_state("m", ttl=ttl),
        "list": state.list_state("l", ttl=ttl),
    }
    return state, handles


def unpacked(parts: dict[int, bytes]) -> dict[int, Any]:
    """A snapshot's parts, read."""
    return {group: msgpack.unpackb(part, strict_map_key=False) for group, part in parts.items()}


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


def written(steps: list, slots: int, model: dict) -> list[tuple[KeyedState, dict[str, Any]]]:
    """Fresh state for each of ``slots`` slots, ``steps`` applied each on the slot that owns
    its key, and on ``model``."""
    states = [opened() for _ in range(slots)]
    for op in steps:
        state, handles = states[_owner(op[1], slots)]
        apply(handles, state, model, op)
    return states


@given(ops, ops, st.integers(1, 5), st.integers(1, 5))
def test_state_restored_onto_any_slots_reads_as_the_model(first, second, before, after):
    """Written on ``before`` slots, each key on the slot owning its group, restored onto
    ``after`` slots from every old slot's snapshot, then written again: as the model."""
    model: dict = {}
    old = written(first, before, model)
    snapshots = [state.snapshot(whole=True) for state, _ in old]
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
    for group, states in unpacked(state.snapshot(whole=True)).items():
        for entries in states.values():
            probe = KeyedState(GROUPS)
            for key, _value, _expires in entries:
                probe.at(key)
                assert probe.group_id == group


@given(st.lists(st.tuples(ops, st.booleans()), min_size=1, max_size=6), st.integers(1, 4),
       st.integers(1, 4), ops)  # fmt: skip
def test_a_chain_of_snapshots_restores_onto_any_slots_as_the_model_and_a_whole_one(
    epochs, before, after, then
):
    """Epochs of writes on ``before`` slots, each ending in a snapshot of every slot, whole or
    of what changed (the first whole); restored onto ``after`` slots from each old slot's chain
    since its last whole snapshot, then written again: as the model, and each new slot holds
    what a restore from whole snapshots gives it."""
    model: dict = {}
    old = [opened() for _ in range(before)]
    chains: list[list[dict[int, bytes]]] = [[] for _ in range(before)]
    for n, (steps, whole) in enumerate(epochs):
        for op in steps:
            state, handles = old[_owner(op[1], before)]
            apply(handles, state, model, op)
        for slot, (state, _) in enumerate(old):
            if whole or n == 0:
                chains[slot] = []
            chains[slot].append(state.snapshot(whole=whole or n == 0))
    wholes = [state.snapshot(whole=True) for state, _ in old]
    new = []
    for slot in range(after):
        owned = groups_of(slot, after, GROUPS).__contains__
        state, handles = opened()
        state.restore([layer for chain in chains for layer in chain], owned)
        plain, _ = opened()
        plain.restore(wholes, owned)
        assert state.snapshot(whole=True) == plain.snapshot(whole=True)
        new.append((state, handles))
    for op in then:
        state, handles = new[_owner(op[1], after)]
        apply(handles, state, model, op)
    for key in ["a", "b", "c", 1, 2, [1, "x"], None]:
        state, handles = new[_owner(key, after)]
        assert read(handles, state, key) == model.get(repr(key), blank())


@given(ops, ops)
def test_a_snapshot_of_changes_names_the_keys_written_since_the_one_before(first, second):
    """Every key whose state reads otherwise than at the last snapshot is in the next snapshot
    of changes, and no key that was not written since."""
    state, handles = opened()
    for op in first:
        apply(handles, state, {}, op)
    state.snapshot(whole=True)
    before = every_key(handles, state)
    for op in second:
        apply(handles, state, {}, op)
    after = every_key(handles, state)
    keys = {repr(k): canonical(k) for k in ["a", "b", "c", 1, 2, [1, "x"], None]}
    differ = {keys[k] for k in after if after[k] != before[k]}
    changes = unpacked(state.snapshot(whole=False))
    entries = [e for states in changes.values() for held in states.values() for e in held]
    named = {e[0] if len(e) == 1 else canonical(e[0]) for e in entries}
    assert differ <= named <= {canonical(key) for _, key, *_ in second}
    assert state.snapshot(whole=False) == {}, "nothing written since"


@given(ops, ops)
def test_writes_noted_with_their_repeats_dropped_give_the_same_snapshots(first, second):
    """In memory each write is noted, repeats and all, until they hold more than they may
    (here 4 items: two writes); dropping the repeats then changes no snapshot of changes."""
    with patch.object(keyed_module, "NOTED_WRITES", 4):
        bounded, bounded_handles = opened()
        plain, plain_handles = opened()
        plain.noted_writes = math.inf  # type: ignore[assignment]  # never bounded
        for ops_ in (first, second):
            for op in ops_:
                apply(bounded_handles, bounded, {}, op)
                bounded.bound()
                apply(plain_handles, plain, {}, op)
            noted = sum(map(len, bounded.written.values()))
            keys = sum(len(set(zip(w[::2], w[1::2], strict=True)))
                       for w in bounded.written.values())  # fmt: skip
            assert noted <= bounded.noted_writes <= max(4, 4 * keys), "bounded by the keys"
            assert bounded.snapshot(whole=False) == plain.snapshot(whole=False)
            plain.noted_writes = math.inf  # type: ignore[assignment]


@pytest.mark.parametrize("on_disk", [False, True])
def test_a_value_that_cannot_be_stored_is_refused_naming_key_group_state_and_key(tmp_path, on_disk):
    """In memory at the next snapshot; on disk at once, as it is encoded when written."""
    state = KeyedState(GROUPS, DiskBackend(tmp_path / "state") if on_disk else None)
    count = state.value_state("count")
    state.at("k")

    def write_and_snapshot() -> None:
        count.set(object())
        state.snapshot(whole=True)

    with pytest.raises(StateError) as refused:
        write_and_snapshot()
    state.close()
    assert str(refused.value).startswith(
        f"key group {state.group_id}, state 'count', key 'k': its value cannot be stored"
    )


def _owner(key: Any, slots: int) -> int:
    probe = KeyedState(GROUPS)
    probe.at(key)
    return next(s for s in range(slots) if probe.group_id in groups_of(s, slots, GROUPS))


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
    snapshot = unpacked(state.snapshot(whole=True))
    kept = {repr(e[0]) for states in snapshot.values() for e in states.get("v", [])}
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
        (
            lambda s: s.value_state(""),
            "a state's name must be a non-empty string without NUL, got ''",
        ),
        (
            lambda s: s.map_state("@window w"),
            "state '@window w': names starting with '@' are the engine's",
        ),
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
    again.restore([state.snapshot(whole=True)], lambda group: True)
    again.at("k")
    assert kept_again.get() == 1
    assert {name for g in range(GROUPS) for name, _ in again.backend.states(g)} == {"kept"}


def test_the_times_a_state_expires_in_are_known_once_it_is_asked_for():
    state = KeyedState(GROUPS)
    state.value_state("plain")
    assert not state.expires_in("processing")
    assert not state.expires_in("event")
    state.map_state("recent", ttl=Ttl(60))
    assert state.expires_in("processing")
    assert not state.expires_in("event")


@given(st.lists(st.tuples(ops, st.booleans()), min_size=1, max_size=4), st.sampled_from([0, 20]))
def test_snapshots_are_the_same_bytes_in_memory_and_on_disk(epochs, noted):
    """The same writes give the same snapshots, whole or of changes, on either backend, and a
    restore onto the other backend reads back as the model: a checkpoint moves between them.
    On disk, an epoch notes entries as stored up to ``noted`` bytes and then keys alone, read
    back at the snapshot: the same bytes either way."""
    with (
        tempfile.TemporaryDirectory(prefix="keyed-disk-") as directory,
        patch.object(keyed_module, "NOTED_BYTES", noted),
    ):
        disk = DiskBackend(Path(directory, "state"))
        try:
            memory, on_memory = opened()
            on_disk, handles = opened(backend=disk)
            model: dict = {}
            for n, (steps, whole) in enumerate(epochs):
                for op in steps:
                    apply(on_memory, memory, {}, op)
                    apply(handles, on_disk, model, op)
                taken = memory.snapshot(whole=whole or n == 0)
                assert on_disk.snapshot(whole=whole or n == 0) == taken
            back, read_back = opened()
            back.restore([on_disk.snapshot(whole=True)], lambda group: True)
            for key in ["a", "b", "c", 1, 2, [1, "x"], None]:
                assert read(read_back, back, key) == model.get(repr(key), blank())
        finally:
            on_disk.close()
        assert not Path(directory, "state").exists(), "closing deletes the backend's directory"


@given(ops, ops, st.sampled_from([None, Ttl(5)]), st.booleans())
def test_a_snapshot_on_disk_is_packed_as_it_is_read_as_the_state_was_at_the_barrier(
    before, after, ttl, whole
):
    """What lets a barrier's snapshot be packed off the task's thread, and what changed be held
    on disk rather than in memory: the parts read after the barrier are that moment's snapshot
    (whole, from a frozen copy; of changes, from entries read as they were then), whatever is
    written or expires after it, read as often as an upload is tried; letting them go deletes
    the copy. In memory the parts are packed at once."""
    with tempfile.TemporaryDirectory(prefix="keyed-frozen-") as directory:
        on_disk, handles = opened(ttl=ttl, backend=DiskBackend(Path(directory, "state")))
        memory, in_memory = opened(ttl=ttl)
        try:
            for state, held in ((on_disk, handles), (memory, in_memory)):
                state.tick(10.0, 0.0)
                for op in before:
                    apply(held, state, {}, op)
                state.tick(12.0, 0.0)
            expected = memory.snapshot(whole=whole)
            later, packed = on_disk.parts(whole=whole), Parts.held(expected)
            assert later.size is None, "measured only once read"
            for state, held in ((on_disk, handles), (memory, in_memory)):
                state.tick(16.0, 0.0)
                for op in after:
                    apply(held, state, {}, op)
            assert dict(later.read()) == dict(later.read()) == expected
            assert later.size == packed.size
            assert on_disk.snapshot(whole=False) == memory.snapshot(whole=False), (
                "what the next snapshot holds starts at the barrier"
            )
            later.release()
            assert sorted(p.name for p in Path(directory).iterdir()) == ["state"]
        finally:
            on_disk.close()


def test_a_state_never_snapshotted_notes_no_changes():
    """A job without checkpoints keeps no record of what changed: it would only grow."""
    state = KeyedState(GROUPS, snapshotted=False)
    count = state.value_state("count", default=0)
    for key in range(100):
        state.at(key)
        count.set(key)
    assert not state.changed()
    state.at(7)
    assert count.get() == 7
