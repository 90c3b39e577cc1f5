"""The fallback to the log: read the next position after a silence, at once again after a read
that found it, a silence later after one that found nothing; never a busy poll."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from peer.log.epidemic.fallback import Fallback


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
