"""The null output: counts what it is given, keeps nothing, is always synced."""

from __future__ import annotations

import pytest

from peer.plugins import PluginError
from peer.plugins.null import output as null_output
from tests.unit.plugins.plugin_fixtures import EPOCH, recovery, task


def started(checkpoint: object = None):
    sink = null_output(task("peer.plugins.null:output", "output", name="drop"), 0, 1)
    sink.recover(recovery(checkpoint))
    return sink


def test_counts_segments_once_written():
    sink = started()
    sink.prepare([1, 2, 3])
    assert sink.written == 0
    assert sink.write()
    assert sink.written == 3
    assert sink.write()
    assert sink.written == 3
    assert sink.synced()
    assert sink.checkpoint(EPOCH) == 3
    sink.committed(EPOCH)
    assert sink.written == 3
    sink.close()


def test_recover_counts_on_from_the_checkpoint():
    sink = started(7)
    sink.prepare([{}])
    sink.write()
    assert sink.written == 8
    assert sink.checkpoint(EPOCH) == 8


def test_a_bad_checkpoint_is_refused():
    with pytest.raises(PluginError) as caught:
        started(-2)
    message = "checkpoint must be a segment count, got -2"
    assert str(caught.value) == f"task 'drop', plugin 'peer.plugins.null:output': {message}"
