"""Extents: fixed and sliding ones hold t and come out as the same floats every time; a key's
sessions never overlap, hold every segment, and do not depend on the order segments came in."""

from __future__ import annotations

import itertools
import math

from hypothesis import given
from hypothesis import strategies as st

from peer.job.spec import Window
from peer.state.windows import GLOBAL, Extent, absorb, extents, session

times = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)
lengths = st.floats(min_value=1e-3, max_value=1e4, allow_nan=False)


def fixed(range_: float) -> Window:
    return Window("w", "t", "fixed", "count", key="t", range=range_)


def sliding(range_: float, slide: float) -> Window:
    return Window("w", "t", "sliding", "count", key="t", range=range_, slide=slide)


@given(times, lengths)
def test_fixed_gives_the_one_extent_holding_t(t, range_):
    [(start, end)] = extents(fixed(range_), t)
    assert start <= t < end
    assert math.isclose(end - start, range_, rel_tol=1e-6, abs_tol=1e-6)
    assert extents(fixed(range_), start) == [(start, end)]


@given(times, st.integers(1, 1000), st.integers(1, 8))
def test_sliding_gives_range_over_slide_extents_holding_t(t, slide, multiple):
    found = extents(sliding(slide * multiple, slide), t)
    assert len(found) == multiple
    assert all(start <= t < end and start % slide == 0 for start, end in found)
    assert [end - start for start, end in found] == [slide * multiple] * multiple
    assert [b[0] - a[0] for a, b in itertools.pairwise(found)] == [slide] * (multiple - 1)


@given(st.integers(-(10**6), 10**6), st.integers(1, 50), st.integers(1, 200))
def test_sliding_gives_every_extent_holding_t_when_slide_does_not_divide(t, slide, range_):
    range_ = max(range_, slide)
    found = extents(sliding(range_, slide), t)
    nearby = range((t - range_) // slide - 1, t // slide + 2)
    expected = [
        (k * slide, k * slide + range_) for k in nearby if k * slide <= t < k * slide + range_
    ]
    assert found == expected


def test_fixed_extent_bounds_are_half_open():
    assert extents(fixed(10), 10) == [(10, 20)]
    assert extents(fixed(10), 9.999) == [(0, 10)]
    assert extents(fixed(10), -0.5) == [(-10, 0)]
    assert 3 * 0.1 > 0.3  # so 0.3 lies in the extent before, whatever 0.3 / 0.1 rounds to
    assert extents(fixed(0.1), 0.3) == [(2 * 0.1, 3 * 0.1)]


def test_global_is_everything():
    assert extents(Window("w", "t", "global", "count"), 123.0) == [GLOBAL]
    assert (-math.inf, math.inf) == GLOBAL


def test_a_segment_opens_extends_and_bridges_sessions():
    opened = session([], 10, 5)
    assert (opened.sessions, opened.extent, opened.merged) == ([(10, 15)], (10, 15), [])
    extended = session(opened.sessions, 13, 5)
    assert (extended.sessions, extended.extent, extended.merged) == (
        [(10, 18)],
        (10, 18),
        [(10, 15)],
    )
    apart = session(extended.sessions, 30, 5)
    assert apart.sessions == [(10, 18), (30, 35)]
    bridge = session(apart.sessions, 22, 5)
    assert bridge.merged == []
    assert bridge.sessions == [(10, 18), (22, 27), (30, 35)]
    bridged = session(bridge.sessions, 26, 5)
    assert bridged.merged == [(22, 27), (30, 35)]
    assert bridged.sessions == [(10, 18), (22, 35)]


def test_a_pause_of_exactly_the_gap_closes_a_session():
    assert session([(10, 15)], 15, 5).sessions == [(10, 15), (15, 20)]
    assert session([(10, 15)], 5, 5).sessions == [(5, 10), (10, 15)]
    assert session([(10, 15)], 5.5, 5).sessions == [(5.5, 15)]


def sessions_of(ts: list[int], gap: int) -> list[Extent]:
    held: list[Extent] = []
    for t in ts:
        merge = session(held, t, gap)
        assert set(merge.merged) <= set(held)
        assert merge.extent in merge.sessions
        assert sorted(set(held) - set(merge.merged) | {merge.extent}) == merge.sessions
        held = merge.sessions
    return held


@given(st.lists(st.integers(0, 200), max_size=40), st.integers(1, 20), st.randoms())
def test_sessions_never_overlap_and_hold_every_segment(ts, gap, random):
    held = sessions_of(ts, gap)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(held))
    for t in ts:
        assert sum(start <= t < end for start, end in held) == 1
    for start, end in held:
        inside = [t for t in ts if start <= t < end]
        assert (start, end) == (min(inside), max(inside) + gap)
    shuffled = list(ts)
    random.shuffle(shuffled)
    assert sessions_of(shuffled, gap) == held


def test_absorb_merges_an_extent_with_every_session_it_overlaps():
    merge = absorb([(0, 5), (6, 8), (10, 12)], (4, 11))
    assert merge.sessions == [(0, 12)]
    assert merge.merged == [(0, 5), (6, 8), (10, 12)]
