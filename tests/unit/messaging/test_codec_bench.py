"""bench/codec.py runs, and every codec it measures gives the batch back exactly."""

from __future__ import annotations

from bench.codec import CODECS, measure


def test_measure_gives_segments_per_second_for_every_codec():
    figures = measure(batches=3, repeat=1)
    assert set(figures) == set(CODECS)
    assert all(per_s > 0 for per_s in figures.values())
