"""The in-memory input: counted or listed segments, split by index, resumed at an index."""

from __future__ import annotations

import pytest

from peer.plugins import PluginError
from peer.plugins.memory import input as memory_input
from tests.unit.plugins.plugin_fixtures import EPOCH, recovery, task

PLUGIN = "peer.plugins.memory:input"


def started(slot: int = 0, slots: int = 1, checkpoint: object = None, **params):
    reader = memory_input(task(PLUGIN, name="read", **params), slot, slots)
    reader.recover(recovery(checkpoint))
    return reader


def test_count_numbers_the_segments():
    reader = started(count=5)
    assert reader.poll(2) == [{"n": 0}, {"n": 1}]
    assert not reader.completed()
    assert reader.poll(10) == [{"n": 2}, {"n": 3}, {"n": 4}]
    assert reader.completed()
    assert reader.poll(10) == []
    assert reader.checkpoint(EPOCH) == 5


def test_segments_come_back_as_plain_fresh_data():
    reader = started(segments=[{"a": [1, 2]}, "b"])
    first = reader.poll(1)[0]
    assert first == {"a": [1, 2]}
    assert type(first) is dict
    assert type(first["a"]) is list
    first["a"].append(3)
    reader.recover(recovery())
    assert reader.poll(5) == [{"a": [1, 2]}, "b"]


def test_slots_split_the_segments_disjointly_and_completely():
    slots = 3
    shares = [started(slot, slots, count=10).poll(100) for slot in range(slots)]
    assert shares == [
        [{"n": 0}, {"n": 3}, {"n": 6}, {"n": 9}],
        [{"n": 1}, {"n": 4}, {"n": 7}],
        [{"n": 2}, {"n": 5}, {"n": 8}],
    ]


def test_a_slot_with_no_share_is_completed_at_once():
    reader = started(3, 4, count=2)
    assert reader.completed()
    assert reader.poll(5) == []


def test_recover_resumes_at_the_index_reached():
    reader = started(1, 2, count=10)
    assert reader.poll(2) == [{"n": 1}, {"n": 3}]
    assert reader.checkpoint(EPOCH) == 5
    assert started(1, 2, reader.checkpoint(EPOCH), count=10).poll(10) == [
        {"n": 5},
        {"n": 7},
        {"n": 9},
    ]


def test_recover_between_a_slots_items_goes_on_to_its_next():
    assert started(1, 3, 5, count=10).poll(10) == [{"n": 7}]


def test_limit_zero_gives_nothing_and_moves_nothing():
    reader = started(count=3)
    assert reader.poll(0) == []
    assert reader.checkpoint(EPOCH) == 0


@pytest.mark.parametrize(
    ("params", "reason"),
    [
        ({}, "set exactly one of params.segments and params.count"),
        ({"count": 1, "segments": []}, "set exactly one of params.segments and params.count"),
        ({"count": -1}, "params.count must be an int >= 0, got -1"),
        ({"count": True}, "params.count must be an int >= 0, got True"),
        ({"count": "3"}, "params.count must be an int >= 0, got '3'"),
        ({"segments": "abc"}, "params.segments must be a list, got 'abc'"),
    ],
)
def test_bad_params_are_named(params, reason):
    with pytest.raises(PluginError) as caught:
        memory_input(task(PLUGIN, name="read", **params), 0, 1)
    assert str(caught.value) == f"task 'read', plugin {PLUGIN!r}: {reason}"


@pytest.mark.parametrize("checkpoint", [-1, "3", [3], 2.0])
def test_a_bad_checkpoint_is_refused(checkpoint):
    with pytest.raises(PluginError, match="checkpoint must be an index >= 0, got "):
        started(checkpoint=checkpoint, count=3)


def test_a_commit_changes_nothing():
    reader = started(count=3)
    reader.poll(1)
    reader.committed(EPOCH)
    assert reader.checkpoint(EPOCH) == 1
    assert reader.poll(5) == [{"n": 1}, {"n": 2}]
