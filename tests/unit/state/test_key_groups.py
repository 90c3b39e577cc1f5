"""Key groups: every key group has exactly one owning slot, slots own contiguous ranges of
nearly equal size."""

from __future__ import annotations

import re
import reprlib
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from peer.job.values import canonical
from peer.state.key_groups import groups_of, held_under, key_group, key_hash, owner
from peer.values.columnar import SchemaViolation

PARALLELISMS = st.integers(1, 300)


def test_key_hash_is_stable_across_processes_and_orders():
    assert key_hash({"b": 1, "a": 2}) == key_hash({"a": 2, "b": 1}) == zlib.crc32(b'{"a":2,"b":1}')


def test_key_groups_split_as_documented():
    assert [groups_of(i, 2, 128) for i in range(2)] == [range(0, 64), range(64, 128)]
    assert [len(groups_of(i, 3, 128)) for i in range(3)] == [43, 43, 42]


@given(PARALLELISMS, st.integers(1, 300))
def test_the_slots_ranges_cover_every_key_group_once_in_order(groups, slots):
    ranges = [groups_of(slot, slots, groups) for slot in range(slots)]
    assert [g for r in ranges for g in r] == list(range(groups))
    sizes = {len(r) for r in ranges}
    assert max(sizes) - min(sizes) <= 1


@given(PARALLELISMS, st.integers(1, 300), st.data())
def test_a_key_group_is_owned_by_the_slot_whose_range_holds_it(groups, slots, data):
    group = data.draw(st.integers(0, groups - 1))
    holder = owner(group, groups, slots)
    assert group in groups_of(holder, slots, groups)
    assert 0 <= holder < slots


@given(st.text(max_size=8) | st.integers() | st.lists(st.integers(), max_size=3), PARALLELISMS)
def test_a_key_falls_in_one_key_group(key, groups):
    assert key_group(key, groups) == key_hash(key) % groups
    assert 0 <= key_group(key, groups) < groups
    assert held_under(key, groups) == (canonical(key), key_group(key, groups))


@pytest.mark.parametrize("key", [{1, 2}, b"raw", object(), {1: "a", "b": 2}])
def test_a_key_json_cannot_hold_has_no_key_group_and_is_named(key):
    with pytest.raises(SchemaViolation, match="has no key group: a group key is a JSON value"):
        held_under(key, 128)
    with pytest.raises(SchemaViolation, match=re.escape(reprlib.repr(key))):
        key_group(key, 128)
