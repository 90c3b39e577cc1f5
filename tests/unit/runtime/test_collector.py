"""A process that carries segments collects its garbage rarely and skips what it started with."""

from __future__ import annotations

import gc

from peer.runtime import collector


def test_the_collector_is_set_for_carrying_segments_once():
    before = gc.get_threshold()
    gc.set_threshold(2000, *before[1:])
    gc.unfreeze()
    try:
        collector.tune()
        frozen = gc.get_freeze_count()
        assert frozen > 0
        assert gc.get_threshold() == (collector.YOUNG, *before[1:])
        collector.tune()
        assert gc.get_freeze_count() == frozen
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()
