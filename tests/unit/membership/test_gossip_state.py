"""The membership state's rules, one by one: the status order, reachability, convergence and
the leader."""

from __future__ import annotations

from pyrsistent import pmap

from peer.membership.gossip import Gossip, Member, Status
from peer.membership.reachability import Observation, Reachability
from peer.membership.vclock import Order

IDS = ["a", "b", "c"]


def formed(statuses: dict[str, Status] | None = None) -> Gossip:
    """Members a, b, c (up unless given), seen by all."""
    statuses = dict.fromkeys(IDS, Status.UP) | (statuses or {})
    members = pmap({m: Member(m, s) for m, s in statuses.items()})
    return Gossip(members=members, seen=frozenset(statuses))


def everyone_sees(state: Gossip) -> Gossip:
    for member in sorted(state.members):
        state = state.seen_by(member)
    return state


def status(state: Gossip, member: str) -> Status:
    return state.members[member].status


def test_statuses_are_declared_in_progress_order():
    assert sorted(Status, key=lambda s: s.progress) == [
        Status.JOINING,
        Status.UP,
        Status.LEAVING,
        Status.EXITING,
        Status.DOWN,
        Status.REMOVED,
    ]


def test_a_status_never_moves_back():
    state = formed().with_member_status("a", "c", Status.LEAVING)
    assert state.with_member_status("a", "c", Status.UP) is state
    assert state.with_member_status("a", "c", Status.LEAVING) is state


def test_a_change_ticks_the_changing_member_and_only_it_has_seen_it():
    before = formed()
    after = before.with_member_status("b", "c", Status.LEAVING)
    assert after.version.compare(before.version) is Order.AFTER
    assert after.version.entries == (("b", 1),)
    assert after.seen == {"b"}


def test_a_new_member_joins():
    state = formed().with_member_status("a", "d", Status.JOINING)
    assert status(state, "d") is Status.JOINING


def test_down_beats_a_concurrent_leave_and_removed_beats_down():
    left = formed().with_member_status("a", "c", Status.EXITING)
    downed = formed().with_member_status("b", "c", Status.DOWN)
    assert status(left.merge(downed), "c") is Status.DOWN
    removed = left.with_member_status("a", "c", Status.REMOVED)
    assert status(removed.merge(downed), "c") is Status.REMOVED


def test_a_downed_member_never_comes_back_up():
    downed = formed().with_member_status("a", "c", Status.DOWN)
    assert status(downed.with_member_status("c", "c", Status.UP), "c") is Status.DOWN
    rejoined = formed().with_member_status("c", "c", Status.JOINING)
    assert status(rejoined.merge(downed), "c") is Status.DOWN


def test_concurrent_changes_merge_into_a_version_nobody_has_seen():
    one = formed().with_member_status("a", "b", Status.LEAVING)
    other = formed().observe("b", "c", reachable=False)
    merged = one.merge(other)
    assert one.version.compare(other.version) is Order.CONCURRENT
    assert merged.seen == frozenset()
    assert merged.version.entries == (("a", 1), ("b", 1))
    assert one.receive("a", other).seen == {"a"}


def test_a_newer_state_is_taken_whole_and_equal_ones_pool_their_seen_sets():
    older = formed()
    newer = older.with_member_status("a", "b", Status.LEAVING)
    assert older.merge(newer) is newer
    assert newer.merge(older) is newer
    assert newer.receive("c", older).seen == {"a", "c"}
    assert newer.seen_by("b").merge(newer.seen_by("c")).seen == {"a", "b", "c"}


def test_unreachable_while_any_monitor_says_so_reachable_when_all_do():
    state = formed().observe("a", "c", reachable=False).observe("b", "c", reachable=False)
    assert state.unreachable("c")
    state = state.observe("a", "c", reachable=True)
    assert state.unreachable("c")
    state = state.observe("b", "c", reachable=True)
    assert not state.unreachable("c")


def test_a_repeated_observation_changes_nothing():
    state = formed()
    assert state.observe("a", "b", reachable=True) is state
    suspected = state.observe("a", "b", reachable=False)
    assert suspected.observe("a", "b", reachable=False) is suspected


def test_a_monitor_spreads_its_later_word():
    suspected = formed().observe("a", "c", reachable=False)
    healed = suspected.observe("a", "c", reachable=True)
    assert not suspected.receive("b", healed).unreachable("c")
    assert not healed.receive("b", suspected).unreachable("c")


def test_a_downed_monitor_no_longer_counts():
    state = formed().observe("b", "c", reachable=False)
    assert state.unreachable("c")
    assert not state.with_member_status("a", "b", Status.DOWN).unreachable("c")


def test_an_equal_version_with_different_words_merges_to_unreachable():
    up = Reachability(pmap({("a", "b"): Observation("a", "b", True, 2)}))
    down = Reachability(pmap({("a", "b"): Observation("a", "b", False, 2)}))
    assert up.merge(down) == down.merge(up) == down


def test_convergence_waits_for_every_member_to_see_the_version():
    state = formed().with_member_status("a", "b", Status.LEAVING)
    assert not state.converged()
    assert not state.seen_by("b").converged()
    assert state.seen_by("b").seen_by("c").converged()


def test_convergence_waits_for_an_unreachable_member_until_it_is_downed():
    state = everyone_sees(formed().observe("a", "c", reachable=False))
    assert not state.converged()
    assert state.leader() == "a"  # who downs c: leading needs no convergence
    downed = state.with_member_status("a", "c", Status.DOWN).seen_by("b")
    assert downed.converged()
    assert downed.leader() == "a"


def test_the_leader_is_the_first_up_or_leaving_member_once_converged():
    assert formed().leader() == "a"
    assert formed({"a": Status.JOINING}).leader() == "b"
    assert formed({"a": Status.EXITING, "b": Status.LEAVING}).leader() == "b"
    assert formed(dict.fromkeys(IDS, Status.JOINING)).leader() is None


def test_an_unreachable_or_downed_member_does_not_lead_and_no_convergence_is_needed():
    state = formed().observe("b", "a", reachable=False)
    assert not state.converged()
    assert state.leader() == "b"
    assert state.observe("b", "a", reachable=True).leader() == "a"
    downed = formed().with_member_status("c", "a", Status.DOWN)
    assert not downed.converged()
    assert downed.leader() == "b"
