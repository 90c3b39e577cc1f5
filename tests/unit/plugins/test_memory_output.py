"""The collecting memory output: each slot's segments kept in this process under a collection
name, cut back to the checkpoint on recovery so a replay holds each segment once."""

from __future__ import annotations

import uuid

import pytest

from peer.plugins import PluginError
from peer.plugins.memory import collected, discard
from peer.plugins.memory import output as memory_output
from tests.unit.plugins.plugin_fixtures import EPOCH, recovery, task

PLUGIN = "peer.plugins.memory:output"


@pytest.fixture
def name():
    chosen = f"test-{uuid.uuid4().hex}"
    yield chosen
    discard(chosen)


def writer(name: str, slot: int = 0, slots: int = 1, checkpoint: object = None, task_name="out"):
    out = memory_output(task(PLUGIN, "output", task_name, collection=name), slot, slots)
    out.recover(recovery(checkpoint))
    return out


def write(out, segments) -> None:
    out.prepare(segments)
    assert out.write()


def test_segments_are_collected_per_task_in_slot_order(name):
    second, first, other = writer(name, 1, 2), writer(name, 0, 2), writer(name, task_name="b")
    write(second, [{"n": 2}])
    write(first, [{"n": 0}, {"n": 1}])
    write(other, ["x"])
    assert collected(name) == {"out": [{"n": 0}, {"n": 1}, {"n": 2}], "b": ["x"]}
    assert first.synced()
    assert first.checkpoint(EPOCH) == 2


def test_nothing_is_collected_before_it_is_written(name):
    out = writer(name)
    out.prepare(["a"])
    assert collected(name) == {"out": []}
    assert out.write()
    assert collected(name) == {"out": ["a"]}


def test_recovery_cuts_back_to_the_checkpoint_so_a_replay_is_held_once(name):
    out = writer(name)
    write(out, ["a", "b"])
    at = out.checkpoint(EPOCH)
    write(out, ["c"])
    again = writer(name, checkpoint=at)
    write(again, ["c"])
    assert collected(name) == {"out": ["a", "b", "c"]}
    writer(name)
    assert collected(name) == {"out": []}


def test_discard_drops_the_collection(name):
    write(writer(name), ["a"])
    discard(name)
    assert collected(name) == {}


@pytest.mark.parametrize("params", [{}, {"collection": ""}, {"collection": 3}])
def test_a_collection_must_be_named(params):
    with pytest.raises(PluginError, match=r"params.collection"):
        memory_output(task(PLUGIN, "output", "out", **params), 0, 1)


@pytest.mark.parametrize("checkpoint", [-1, "3", 2.0])
def test_a_bad_checkpoint_is_refused(name, checkpoint):
    with pytest.raises(PluginError, match="checkpoint must be a segment count"):
        writer(name, checkpoint=checkpoint)
