"""A snapshot of many entries in memory is packed by a child forked at the barrier: its parts are
those packed in place, as the state was at the barrier, whatever is written after; a failure in
the child reaches whoever reads the parts, and parts let go of stop the child."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from unittest.mock import patch

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from peer.state import forked as forked_module
from peer.state.forked import ForkedPacking, PackingFailed, forked, worth_forking
from peer.state.keyed import KeyedState, Parts
from tests.unit.state.test_keyed import apply, opened, ops

EVERY = patch.object(forked_module, "ENTRIES_PER_MIB", 0)
"""Every snapshot of an entry or more is forked."""


def packing(parts: Parts) -> ForkedPacking | None:
    """The child packing ``parts``, if one does."""
    packer = getattr(parts._read, "__self__", None)
    return packer if isinstance(packer, ForkedPacking) else None


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops, ops, st.booleans())
def test_a_forked_snapshot_is_the_one_packed_in_place_as_it_was_at_the_barrier(
    before, after, whole
):
    forking, in_place = opened(), opened()
    for state, handles in (forking, in_place):
        for op in before:
            apply(handles, state, {}, op)
    expected = in_place[0].snapshot(whole=whole)
    with EVERY:
        parts = forking[0].parts(whole=whole)
    assert (packing(parts) is not None) == bool(expected), "forked when it packs any entry"
    for state, handles in (forking, in_place):
        for op in after:
            apply(handles, state, {}, op)
    assert dict(parts.read()) == dict(parts.read()) == expected, "read as often as tried"
    assert parts.size == sum(len(part) for part in expected.values())
    parts.release()
    assert forking[0].snapshot(whole=False) == in_place[0].snapshot(whole=False), (
        "what the next snapshot holds starts at the barrier"
    )


def one_key(value: object) -> tuple[KeyedState, Parts]:
    """A state holding ``value`` under key "k", and its whole snapshot, forked."""
    state, handles = opened()
    state.at("k")
    handles["value"].set(value)
    with EVERY:
        return state, state.parts(whole=True)


def test_a_value_the_child_cannot_store_fails_the_read_naming_key_group_state_and_key():
    state, parts = one_key(object())
    with pytest.raises(PackingFailed) as failed:
        list(parts.read())
    parts.release()
    assert str(failed.value) == (
        "a snapshot of the keyed state failed: "
        f"key group {state.group_id}, state 'v', key 'k': its value cannot be stored "
        "(values are numbers, strings, bytes, lists, maps and None): "
        "can not serialize 'object' object"
    )


def never_done() -> Iterator[tuple[int, bytes]]:
    """A packing that never ends: the child waits for a signal."""
    signal.pause()
    yield 0, b""


def test_a_child_that_is_killed_fails_the_read_saying_so():
    child = forked(never_done)
    os.kill(child.pid, signal.SIGKILL)
    with pytest.raises(PackingFailed, match="the process packing it ended on signal 9"):
        list(child.read())
    child.release()


def test_parts_let_go_of_unread_stop_the_child_and_leave_no_process():
    child = forked(never_done)
    child.release()
    with pytest.raises(ChildProcessError):
        os.waitpid(child.pid, os.WNOHANG)
    with pytest.raises(PackingFailed, match="its parts were let go of before they were read"):
        list(child.read())


def test_a_snapshot_is_forked_once_it_holds_more_entries_than_packing_costs_per_resident_mib():
    """The process holds tens of MiB at least; a few entries pack sooner than a fork."""
    assert not worth_forking(10)
    assert worth_forking(10**9)
