"""Windows of a keyed task kept in the slot's keyed state (peer.state.task_state's
KeyedExtents): for any segments and watermarks they emit what windows kept in dicts of their own
do, in memory and on disk; restored from a chain of the keyed state's snapshots (whole, then
what changed) they go on as the original would; restored by key group into any number of slots,
the slots together emit what the original does."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from peer.job.spec import Job, JobError, Task, Trigger, Window
from peer.job.validate import validate
from peer.state import KeyedState, TaskState
from peer.state.backends import DiskBackend, MemoryBackend
from peer.state.key_groups import groups_of
from tests.unit.state.test_state_snapshots import TRIGGERS, WINDOWS, ops, run
from tests.unit.state.windowed import FNS, by_user, closed, job, seg, state

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
        assert closed(restored.finish()) == closed(original.finish()) == closed(heap.finish())


@given(ops, st.integers(1, 4))
def test_keyed_windows_restored_by_key_group_into_slots_emit_what_the_original_does(steps, slots):
    with keyed(on_disk=False) as (original, held):
        for op in steps:
            run(original, op)
        taken, parts = header(original), held.snapshot(whole=True)
        expected = closed(original.finish())
    emitted = []
    for slot in range(slots):
        owned = groups_of(slot, slots, GROUPS)
        with keyed(on_disk=False) as (part, part_held):
            part.restore([taken], lambda key: True)
            part_held.restore([parts], owned.__contains__)
            emitted += closed(part.finish())
    assert sorted(map(repr, emitted)) == sorted(map(repr, expected))


COUNTED = Window("n", "agg", "global", "count", ttl=50)
AT_END = Trigger("n", "watermark")


def counts(emitted: list) -> dict:
    return {e["key"]: e["value"] for e in emitted}


@pytest.mark.parametrize("on_disk", [False, True])
def test_a_key_whose_window_took_nothing_for_its_ttl_is_forgotten_unfired(on_disk):
    """ttl counts processing time from a key's last segment: a takes segments at 0 and 40, b
    at 0 only, c at 100; at 100, b's last write is 100 s old (past its 50 s), a's 60 (past
    too), and at 80 a's was 40 (within)."""
    with tempfile.TemporaryDirectory(prefix="windows-") as directory:
        backend = DiskBackend(Path(directory, "state")) if on_disk else MemoryBackend()
        held = KeyedState(GROUPS, backend)
        windows = TaskState(job((COUNTED,), (AT_END,)), "agg", by_user, held)
        try:
            windows.apply([seg("a", 0), seg("b", 0)], now=0.0)
            windows.apply([seg("a", 0)], now=40.0)
            windows.apply([seg("c", 0)], now=80.0)
            parts = held.snapshot(whole=True)
            windows.apply([seg("c", 0)], now=100.0)
            assert counts(closed(windows.finish())) == {"c": 2}
        finally:
            held.close()
    again = KeyedState(GROUPS)
    restored = TaskState(job((COUNTED,), (AT_END,)), "agg", by_user, again)
    again.restore([parts], lambda group: True)
    restored.tick(80.0)
    assert counts(closed(restored.finish())) == {"a": 2, "c": 1}, "the snapshot at 80 had b expired"


def test_a_window_ttl_is_refused_for_a_task_that_does_not_group_or_when_not_positive():
    ungrouped = Job(
        id="j", workflow=(("read", "agg"), ("agg", "write")),
        catalog=(Task("read", "input", plugin=f"{FNS}:read", n_peers=1),
                 Task("agg", "function", fn=f"{FNS}:identity"),
                 Task("write", "output", plugin=f"{FNS}:read")),
        windows=(COUNTED,), triggers=(AT_END,),
    )  # fmt: skip
    with pytest.raises(JobError, match="window 'n': ttl is for the windows of a task that groups"):
        validate(ungrouped)
    with pytest.raises(JobError, match="window 'n': ttl must be a number of seconds > 0, got 0"):
        job((replace(COUNTED, ttl=0),), (AT_END,))
