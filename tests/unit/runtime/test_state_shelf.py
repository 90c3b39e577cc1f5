"""The shelf of keyed state a process's closed slots leave for its job's next allocation: each
shelved state goes to one heir, the new slot that owns the most of it; a slot keeping its
heir's state and restoring only the key groups it gained reads as the plain dict model; what
no slot takes, or what is not exactly the restore point's, is closed."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from peer.runtime.state_shelf import Shelved, Slot, StateShelf
from peer.state.backends import DiskBackend, MemoryBackend
from peer.state.key_groups import groups_of, overlap
from peer.values.epoch import Epoch
from tests.unit.state.test_keyed import (
    GROUPS,
    _owner,
    apply,
    blank,
    opened,
    ops,
    read,
    written,
)

EPOCH = Epoch(1, 7)
KEYS = ["a", "b", "c", 1, 2, [1, "x"], None]
"""Every key the ops write."""


class Closes(MemoryBackend):
    """A memory backend that tells whether it was closed."""

    closed = False

    def close(self) -> None:
        self.closed = True
        super().close()


def shelved(slot: int, slots: int, epoch: Epoch = EPOCH, groups: int = 128) -> Shelved:
    return Shelved("job", "count", epoch, slot, slots, groups, Closes())


@given(st.integers(1, 64), st.integers(1, 64))
def test_each_shelved_state_s_heir_owns_the_most_of_it_and_the_lower_slot_wins_a_tie(old, new):
    for slot in range(old):
        s = shelved(slot, old)
        shares = [len(overlap(groups_of(n, new, 128), s.held)) for n in range(new)]
        assert s.heir(new) == shares.index(max(shares))


@pytest.mark.parametrize(
    ("old", "new", "heirs"), [(2, 3, [0, 2]), (3, 2, [0, 1, 1]), (2, 2, [0, 1])]
)
def test_heirs_of_known_changes_of_slots(old, new, heirs):
    """From 2 slots to 3, the middle slot gains from both and keeps neither's state; from 3 to
    2, the second slot is heir to both of the old slots it took from."""
    assert [shelved(slot, old).heir(new) for slot in range(old)] == heirs


def test_a_slot_takes_only_the_state_of_its_restore_point_and_the_rest_for_it_is_closed():
    shelf = StateShelf()
    stale, exact = shelved(0, 2, Epoch(1, 6)), shelved(1, 2)
    shelf.put(stale)
    shelf.put(exact)
    assert shelf.take(Slot("job", "count", 0, 1), EPOCH) is exact
    assert stale.backend.closed
    assert not exact.backend.closed
    assert shelf.held == []


def test_other_jobs_and_tasks_are_not_taken():
    shelf = StateShelf()
    other = Shelved("other", "count", EPOCH, 0, 1, 128, Closes())
    shelf.put(other)
    assert shelf.take(Slot("job", "count", 0, 1), EPOCH) is None
    assert shelf.take(Slot("job", "other task", 0, 1), EPOCH) is None
    assert shelf.held == [other]


def test_a_slot_that_restores_from_no_epoch_takes_nothing_and_what_was_for_it_is_closed():
    shelf = StateShelf()
    mine = shelved(0, 1)
    shelf.put(mine)
    assert shelf.take(Slot("job", "count", 0, 1), None) is None
    assert mine.backend.closed
    assert shelf.held == []


def test_what_no_waiting_slot_would_take_is_closed_and_the_rest_kept():
    shelf = StateShelf()
    mine, nobody = shelved(0, 2), shelved(1, 2)
    shelf.put(mine)
    shelf.put(nobody)
    shelf.prune([Slot("job", "count", 0, 3), Slot("job", "count", 1, 3)])  # slot 2 is elsewhere
    assert shelf.held == [mine]
    assert nobody.backend.closed
    assert not mine.backend.closed
    shelf.close()
    assert mine.backend.closed
    assert shelf.held == []


@given(ops, ops, st.integers(1, 5), st.integers(1, 5))
def test_state_kept_by_heirs_and_gained_from_snapshots_reads_as_the_model(
    first, second, before, after
):
    """Written on ``before`` slots and snapshotted, each old slot's state shelved; each of
    ``after`` new slots keeps what it owns of the state it is heir to and restores only the key
    groups it gained, from the other old slots' snapshots; then written again: as the model,
    and each new slot holds exactly what a restore of every snapshot gives it."""
    model: dict = {}
    old = written(first, before, model)
    snapshots = [state.snapshot(whole=True) for state, _ in old]
    shelf = StateShelf()
    for slot, (state, _) in enumerate(old):
        shelf.put(Shelved("job", "count", EPOCH, slot, before, GROUPS, state.backend))
    new = []
    for slot in range(after):
        owned = groups_of(slot, after, GROUPS)
        state, handles = opened()
        kept = shelf.take(Slot("job", "count", slot, after), EPOCH)
        gained = snapshots
        if kept is not None:
            state.adopt(kept.backend, owned)
            gained = [s for o, s in enumerate(snapshots) if o != kept.slot]
        state.restore(gained, owned.__contains__)
        plain, _ = opened()
        plain.restore(snapshots, owned.__contains__)
        assert state.snapshot(whole=True) == plain.snapshot(whole=True)
        new.append((state, handles))
    assert shelf.held == []
    for op in second:
        state, handles = new[_owner(op[1], after)]
        apply(handles, state, model, op)
    for key in KEYS:
        state, handles = new[_owner(key, after)]
        assert read(handles, state, key) == model.get(repr(key), blank())


@given(steps=ops)
def test_a_disk_backend_keeps_only_the_key_groups_it_is_told(steps, tmp_path_factory):
    """What keep_only drops on disk is gone (read, listed and snapshotted), and what it keeps
    reads as before."""
    directory: Path = tmp_path_factory.mktemp("kept")
    state, handles = opened(backend=DiskBackend(directory / "state"))
    try:
        for op in steps:
            apply(handles, state, {}, op)
        before = {repr(key): read(handles, state, key) for key in KEYS}
        owned = range(4, 11)
        state.backend.keep_only(owned)
        assert all(group in owned for group in state.backend.groups())
        assert all(group in owned for group in state.snapshot(whole=True))
        for key in KEYS:
            state.at(key)
            expected = before[repr(key)] if state.group_id in owned else blank()
            assert read(handles, state, key) == expected
    finally:
        state.close()
