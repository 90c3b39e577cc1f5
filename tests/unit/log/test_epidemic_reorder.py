"""The reorder cache: entries arrive in any order, with duplicates and gaps; they leave in log
order, each once, and the cache never outgrows its bound."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from peer.log.epidemic.reorder import ReorderCache


def data(position):
    return f"entry {position}".encode()


def drain(cache, log, consumed):
    """Consume what the cache yields; when it is stuck, read the next position from ``log`` (what
    the fallback does), until the log is exhausted."""
    while True:
        run, cache = cache.take()
        consumed.extend(run)
        if cache.next not in log:
            return cache
        cache = cache.add(cache.next, log[cache.next])


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 40).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.lists(st.integers(0, n - 1), max_size=3 * n),
            st.integers(1, 10),
            st.lists(st.booleans(), max_size=3 * n),
        )
    )
)
def test_every_position_is_consumed_once_in_order_whatever_the_arrivals(case):
    n, arrivals, bound, stuck_reads = case
    log = {p: data(p) for p in range(n)}
    cache = ReorderCache(next=0, bound=bound)
    consumed = []
    for i, position in enumerate(arrivals):
        cache = cache.add(position, log[position])
        assert len(cache.held) <= bound
        assert all(p >= cache.next for p in cache.held)
        run, cache = cache.take()
        consumed.extend(run)
        if i < len(stuck_reads) and stuck_reads[i] and cache.next in log:
            cache = cache.add(cache.next, log[cache.next])
    cache = drain(cache, log, consumed)
    assert consumed == [(p, data(p)) for p in range(n)]
    assert cache.next == n
    assert not cache.held


def test_the_farthest_positions_go_first_when_over_the_bound():
    cache = ReorderCache(next=0, bound=2)
    cache = cache.add(5, data(5)).add(3, data(3)).add(4, data(4))
    assert sorted(cache.held) == [3, 4]
    assert sorted(cache.add(9, data(9)).held) == [3, 4]


def test_an_evicted_entry_is_read_later_and_consumed_in_order():
    log = {p: data(p) for p in range(6)}
    cache = ReorderCache(next=0, bound=2)
    for position in (1, 2, 3, 4, 5):
        cache = cache.add(position, log[position])
    assert sorted(cache.held) == [1, 2]
    consumed = []
    cache = drain(cache, log, consumed)
    assert [p for p, _ in consumed] == [0, 1, 2, 3, 4, 5]


def test_take_yields_nothing_until_the_next_position_is_there():
    cache = ReorderCache(next=2, bound=8).add(3, data(3))
    run, same = cache.take()
    assert run == ()
    assert same == cache
    run, after = cache.add(2, data(2)).take()
    assert run == ((2, data(2)), (3, data(3)))
    assert after.next == 4


def test_consumed_and_repeated_positions_change_nothing():
    cache = ReorderCache(next=4, bound=8).add(6, data(6))
    assert cache.add(3, data(3)) == cache
    assert cache.add(6, b"other") == cache


def test_advance_to_drops_what_comes_before():
    cache = ReorderCache(next=0, bound=8).add(2, data(2)).add(7, data(7))
    moved = cache.advance_to(5)
    assert moved.next == 5
    assert dict(moved.held) == {7: data(7)}
    with pytest.raises(ValueError, match="cannot go back from position 5 to 4"):
        moved.advance_to(4)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: ReorderCache(next=-1, bound=1), "next log position must be 0 or more, not -1"),
        (lambda: ReorderCache(next=0, bound=0), "hold 1 entry or more, not 0"),
    ],
)
def test_bad_values_are_refused_by_name(make, message):
    with pytest.raises(ValueError, match=message):
        make()
