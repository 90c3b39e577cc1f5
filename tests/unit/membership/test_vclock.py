"""Vector clocks: merge is a join (so gossip converges whatever the order), compare is its order."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from peer.membership.vclock import Order, VectorClock

NODES = st.sampled_from(["a", "b", "c", "d"])
CLOCKS = st.dictionaries(NODES, st.integers(min_value=0, max_value=3)).map(VectorClock.of)
AT_LEAST = frozenset({Order.AFTER, Order.SAME})
MIRROR = {
    Order.SAME: Order.SAME,
    Order.BEFORE: Order.AFTER,
    Order.AFTER: Order.BEFORE,
    Order.CONCURRENT: Order.CONCURRENT,
}


@settings(deadline=None)
@given(CLOCKS, CLOCKS)
def test_merge_is_commutative(a, b):
    assert a.merge(b) == b.merge(a)


@settings(deadline=None)
@given(CLOCKS, CLOCKS, CLOCKS)
def test_merge_is_associative(a, b, c):
    assert a.merge(b).merge(c) == a.merge(b.merge(c))


@settings(deadline=None)
@given(CLOCKS)
def test_merge_is_idempotent(a):
    assert a.merge(a) == a
    assert a.compare(a) is Order.SAME


@settings(deadline=None)
@given(CLOCKS, CLOCKS)
def test_merge_is_at_least_both(a, b):
    merged = a.merge(b)
    assert merged.compare(a) in AT_LEAST
    assert merged.compare(b) in AT_LEAST


@settings(deadline=None)
@given(CLOCKS, NODES)
def test_tick_moves_a_clock_after_its_old_self(a, node):
    assert a.tick(node).compare(a) is Order.AFTER
    assert a.compare(a.tick(node)) is Order.BEFORE


@settings(deadline=None)
@given(CLOCKS, CLOCKS)
def test_compare_mirrors(a, b):
    assert b.compare(a) is MIRROR[a.compare(b)]


def test_ticks_at_different_nodes_are_concurrent():
    base = VectorClock().tick("a")
    assert base.tick("a").compare(base.tick("b")) is Order.CONCURRENT
    assert base.tick("a").merge(base.tick("b")) == VectorClock.of({"a": 2, "b": 1})


def test_zero_counters_are_dropped_so_equal_clocks_are_equal_values():
    assert VectorClock.of({"b": 1, "a": 0}) == VectorClock((("b", 1),))
    assert hash(VectorClock.of({"a": 1, "b": 2})) == hash(VectorClock.of({"b": 2, "a": 1}))


@pytest.mark.parametrize("entries", [(("b", 1), ("a", 1)), (("a", 0),), (("a", 1), ("a", 2))])
def test_only_normal_clocks_are_made(entries):
    with pytest.raises(ValueError, match="not a normal vector clock"):
        VectorClock(entries)
