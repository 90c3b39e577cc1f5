"""The fallback to the log: read the next position after a silence, at once again after a read
that found it, a silence later after one that found nothing; never a busy poll. One scout per
position reads before everyone else; a missing position is trimmed when the origin reaches it."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from peer.log.epidemic.fallback import Fallback, scout, trimmed


def test_nothing_is_read_before_a_silence_without_entries():
    timer = Fallback.start(now=10.0, silence=2.0)
    assert timer.position_to_read(11.9, next_position=4) is None
    assert timer.position_to_read(12.0, next_position=4) == 4


def test_a_consumed_entry_puts_the_read_off():
    timer = Fallback.start(now=0.0, silence=2.0).after_consumed(1.5)
    assert timer.position_to_read(3.0, 7) is None
    assert timer.position_to_read(3.5, 7) == 7


def test_a_read_that_found_the_entry_reads_the_next_at_once():
    timer = Fallback.start(now=0.0, silence=2.0).after_read(2.0, found=True)
    assert timer.position_to_read(2.0, 8) == 8


def test_a_read_that_found_nothing_waits_a_silence():
    timer = Fallback.start(now=0.0, silence=2.0).after_read(2.0, found=False)
    assert timer.position_to_read(3.9, 8) is None
    assert timer.due_at == 4.0


@settings(max_examples=200, deadline=None)
@given(
    st.floats(0.1, 5.0),
    st.lists(
        st.tuples(st.floats(0.0, 3.0), st.sampled_from(["consumed", "found", "nothing"])),
        max_size=60,
    ),
)
def test_reads_that_find_nothing_are_a_silence_apart(silence, steps):
    """However events interleave, a member never reads again within a silence of a read that
    found nothing, unless an entry was found in between."""
    timer = Fallback.start(now=0.0, silence=silence)
    now = 0.0
    last_empty = None
    for gap, outcome in steps:
        now += gap
        if outcome == "consumed":
            timer = timer.after_consumed(now)
            continue
        if timer.position_to_read(now, 0) is None:
            continue
        if last_empty is not None:
            assert now >= last_empty + silence
        timer = timer.after_read(now, found=outcome == "found")
        last_empty = now if outcome == "nothing" else None


@pytest.mark.parametrize("silence", [0.0, -1.0, float("nan")])
def test_a_silence_that_is_not_positive_is_refused(silence):
    with pytest.raises(ValueError, match="silence before reading the log must be above 0 s"):
        Fallback.start(now=0.0, silence=silence)


def reads(timer: Fallback, scout: bool, until: float) -> list[float]:
    """When a member reads, finding nothing each time, until ``until``."""
    times = []
    while timer.due_at <= until:
        times.append(timer.due_at)
        timer = timer.after_read(timer.due_at, found=False, scout=scout)
    return times


@settings(max_examples=100, deadline=None)
@given(st.floats(0.05, 5.0), st.floats(0.0, 1000.0), st.integers(1, 30))
def test_the_others_always_read_a_quarter_silence_off_the_scouts_reads(silence, then, silences):
    """Members that consumed the same entry at ``then``: whenever the next one is written, the
    scout has read it a quarter silence before any other member looks, which leaves its rumor
    that long to reach them; and the others read half as often."""
    start = Fallback.start(now=0.0, silence=silence)
    until = then + silences * silence
    scout_reads = reads(start.after_consumed(then, scout=True), True, until)
    other_reads = reads(start.after_consumed(then, scout=False), False, until)
    assert len(other_reads) <= len(scout_reads) // 2 + 1
    for other in other_reads:
        before = max(r for r in scout_reads if r <= other)
        assert other - before >= silence / 4 - 1e-9 * max(1.0, other)


@settings(max_examples=100, deadline=None)
@given(st.sets(st.text(min_size=1, max_size=4), min_size=1, max_size=20), st.integers(0, 10**9))
def test_every_member_draws_the_same_scout_among_the_members(members, position):
    ordered = tuple(sorted(members))
    chosen = scout(position, ordered)
    assert chosen in members
    assert scout(position, ordered) == chosen


def test_scouting_is_shared_by_all_members_and_none_without_members():
    members = ("a", "b", "c", "d")
    drawn = Counter(scout(p, members) for p in range(2000))
    assert set(drawn) == set(members)
    assert min(drawn.values()) > 350
    assert scout(7, ()) is None


@pytest.mark.parametrize(
    ("position", "origin", "trimmed_away"),
    [(3, -1, False), (3, 2, False), (3, 3, True), (3, 10, True), (0, -1, False)],
)
def test_a_missing_position_was_trimmed_exactly_when_the_origin_reaches_it(
    position, origin, trimmed_away
):
    assert trimmed(position, origin) is trimmed_away
