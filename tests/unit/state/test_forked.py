"""A whole snapshot of a large state in memory is packed by a child forked at the barrier: its
parts are those packed in place, as the state was at the barrier, whatever is written after; a
failure in the child reaches whoever reads the parts, and parts let go of stop the child."""

from __future__ import annotations

import os
import signal
from unittest.mock import patch

import pytest
from hypothesis import HealthCheck, given, settings

from peer.state import keyed as keyed_module
from peer.state.forked import ForkedPacking, PackingFailed
from tests.unit.state.test_keyed import apply, opened, ops


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops, ops)
def test_a_forked_whole_snapshot_is_the_one_packed_in_place_as_it_was_at_the_barrier(before, after):
    forking, in_place = opened(), opened()
    for state, handles in (forking, in_place):
        for op in before:
            apply(handles, state, {}, op)
    expected = in_place[0].snapshot(whole=True)
    with patch.object(keyed_module, "FORK_ENTRIES", 0):
        parts = forking[0].parts(whole=True)
    assert isinstance(parts._read.__self__, ForkedPacking)
    for state, handles in (forking, in_place):
        for op in after:
            apply(handles, state, {}, op)
    assert dict(parts.read()) == dict(parts.read()) == expected, "read as often as tried"
    assert parts.size == sum(len(part) for part in expected.values())
    parts.release()
    assert forking[0].snapshot(whole=False) == in_place[0].snapshot(whole=False), (
        "what the next snapshot holds starts at the barrier"
    )


def test_a_value_the_child_cannot_store_fails_the_read_naming_key_group_state_and_key():
    state, handles = opened()
    state.at("k")
    handles["value"].set(object())
    with patch.object(keyed_module, "FORK_ENTRIES", 0):
        parts = state.parts(whole=True)
    with pytest.raises(PackingFailed) as failed:
        list(parts.read())
    parts.release()
    assert str(failed.value) == (
        "a whole snapshot of the keyed state failed: "
        f"key group {state.group_id}, state 'v', key 'k': its value cannot be stored "
        "(values are numbers, strings, bytes, lists, maps and None): "
        "can not serialize 'object' object"
    )


def test_a_child_that_is_killed_fails_the_read_saying_so():
    state, handles = opened()
    state.at("k")
    handles["value"].set(1)
    with patch.object(keyed_module, "FORK_ENTRIES", 0):
        parts = state.parts(whole=True)
    packing = parts._read.__self__
    os.kill(packing.pid, signal.SIGKILL)
    with pytest.raises(PackingFailed, match="the process packing it ended on signal 9"):
        list(parts.read())
    parts.release()


def test_parts_let_go_of_unread_stop_the_child_and_leave_no_process():
    state, handles = opened()
    state.at("k")
    handles["value"].set(1)
    with patch.object(keyed_module, "FORK_ENTRIES", 0):
        parts = state.parts(whole=True)
    pid = parts._read.__self__.pid
    parts.release()
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
