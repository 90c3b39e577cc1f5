"""Windows of a keyed task kept in the slot's keyed state (peer.state.task_state's
KeyedExtents): for any segments and watermarks they emit what windows kept in dicts of their own
do, in memory and on disk; restored from a chain of the keyed state's snapshots (whole, then
what changed) they go on as the original would; restored by key group into any number of slots,
the slots together emit what the original does."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

import msgpack
from hypothesis import given
from hypothesis import strategies as st

from peer.state import KeyedState, TaskState
from peer.state.backends import DiskBackend, MemoryBackend
from peer.state.key_groups import groups_of
from tests.unit.state.test_state_snapshots import TRIGGERS, WINDOWS, ops, run
from tests.unit.state.windowed import by_user, job, state

GROUPS = 16


@contextlib.contextmanager
def keyed(on_disk: bool) -> Iterator[tuple[TaskState, KeyedState]]:
    """A task's windows in keyed state on the backend asked for, closed after."""
    with tempfile.TemporaryDirectory(prefix="windows-") as directory:
        backend = DiskBackend(Path(directory, "state")) if on_disk else MemoryBackend()
        held = KeyedState(GROUPS, backend)
        try:
            yield TaskState(job(WINDOWS, TRIGGERS), "agg", by_user, held), held
        finally:
            held.close()


def header(s: TaskState) -> dict:
    """The snapshot's header as a restoring peer reads it: the watermark, no window's slots."""
    return msgpack.unpackb(msgpack.packb(s.snapshot()), strict_map_key=False)


@given(ops, st.integers(0, 12), st.booleans(), st.booleans())
def test_keyed_windows_emit_as_their_own_do_and_go_on_from_a_chain(steps, cut, on_disk, whole):
    heap = state(WINDOWS, TRIGGERS)
    with keyed(on_disk) as (original, held), keyed(on_disk) as (restored, again):
        chain: list[dict[int, bytes]] = []
        for op in steps[:cut]:
            assert run(original, op) == run(heap, op)
            taking = whole or not chain  # a whole snapshot starts a new chain
            chain = [*([] if taking else chain), held.snapshot(whole=taking)]
        taken = header(original)
        assert all(not saved for saved in taken["windows"].values())
        restored.restore([taken], lambda key: True)
        again.restore(chain, lambda group: True)
        for op in steps[cut:]:
            assert run(restored, op) == run(original, op) == run(heap, op)
        assert restored.finish() == original.finish() == heap.finish()


@given(ops, st.integers(1, 4))
def test_keyed_windows_restored_by_key_group_into_slots_emit_what_the_original_does(steps, slots):
    with keyed(on_disk=False) as (original, held):
        for op in steps:
            run(original, op)
        taken, parts = header(original), held.snapshot(whole=True)
        expected = original.finish()
    emitted = []
    for slot in range(slots):
        owned = groups_of(slot, slots, GROUPS)
        with keyed(on_disk=False) as (part, part_held):
            part.restore([taken], lambda key: True)
            part_held.restore([parts], owned.__contains__)
            emitted += part.finish()
    assert sorted(map(repr, emitted)) == sorted(map(repr, expected))
