"""Who monitors whom on the hashed ring: full coverage, no self-monitoring, the two directions
agree, the answer does not depend on the order members come in, and a join disturbs only its
neighbourhood."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from peer.membership.monitors import DEFAULT_MONITORS, monitors_of, receivers, ring

GROUPS = [f"g{i}" for i in range(8)]

member_sets = st.sets(st.text(min_size=1, max_size=6), min_size=1, max_size=25)
monitor_counts = st.integers(1, 8)


def test_the_ring_is_ordered_by_crc32_the_same_in_every_process():
    # Pinned: a salted hash() would give another order in another process.
    assert ring(GROUPS) == ("g1", "g5", "g4", "g0", "g2", "g6", "g7", "g3")


def test_receivers_follow_and_monitors_precede_on_the_ring():
    assert receivers(GROUPS, "g0", 3) == ("g2", "g6", "g7")
    assert monitors_of(GROUPS, "g0", 3) == ("g4", "g5", "g1")
    assert receivers(GROUPS, "g7", 3) == ("g3", "g1", "g5")  # wraps around


def test_five_monitors_by_default_and_fewer_in_a_small_cluster():
    assert DEFAULT_MONITORS == 5
    assert len(receivers(GROUPS, "g0")) == 5
    assert len(monitors_of(GROUPS[:3], "g0")) == 2
    assert receivers(["g0"], "g0") == ()
    assert monitors_of(["g0"], "g0") == ()


def test_a_stranger_or_no_monitors_is_refused():
    with pytest.raises(ValueError, match="'g9' is not a member"):
        receivers(GROUPS, "g9")
    with pytest.raises(ValueError, match="'g9' is not a member"):
        monitors_of(GROUPS, "g9")
    with pytest.raises(ValueError, match="at least 1, not 0"):
        receivers(GROUPS, "g0", 0)


@settings(deadline=None)
@given(member_sets, monitor_counts)
def test_everyone_has_exactly_min_k_n_minus_1_others_each_way(members, k):
    expected = min(k, len(members) - 1)
    for member in sorted(members):
        watched, watching = receivers(members, member, k), monitors_of(members, member, k)
        assert member not in watched
        assert member not in watching
        assert len(set(watched)) == len(watched) == expected
        assert len(set(watching)) == len(watching) == expected
        assert set(watched) | set(watching) <= members


@settings(deadline=None)
@given(member_sets, monitor_counts)
def test_receivers_and_monitors_are_the_two_directions_of_one_relation(members, k):
    for observer in sorted(members):
        for subject in sorted(members):
            sends = subject in receivers(members, observer, k)
            assert sends == (observer in monitors_of(members, subject, k))


@settings(deadline=None)
@given(member_sets.flatmap(lambda ms: st.permutations(sorted(ms))), monitor_counts)
def test_the_answer_does_not_depend_on_the_order_members_come_in(shuffled, k):
    as_set = frozenset(shuffled)
    with_repeats = [*shuffled, *reversed(shuffled)]
    for member in sorted(as_set):
        answer = receivers(as_set, member, k)
        assert receivers(shuffled, member, k) == answer
        assert receivers(with_repeats, member, k) == answer
        assert monitors_of(shuffled, member, k) == monitors_of(as_set, member, k)


@settings(deadline=None)
@given(member_sets, st.text(min_size=1, max_size=6), monitor_counts)
def test_a_join_changes_the_receivers_of_at_most_k_plus_1_observers(members, joiner, k):
    members = members - {joiner}
    assume(members)
    after = members | {joiner}
    changed = {m for m in members if receivers(members, m, k) != receivers(after, m, k)}
    # The observers whose receivers change are exactly the joiner's monitors; with the joiner
    # itself, at most k + 1 observers have anything new to do.
    assert changed == set(monitors_of(after, joiner, k))
    assert len(changed | {joiner}) <= k + 1
