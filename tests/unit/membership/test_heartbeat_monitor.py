"""A member's heartbeat monitor and the leader's downing clocks, one rule at a time."""

from __future__ import annotations

from peer.membership.auto_down import AutoDown
from peer.membership.gossip import Gossip, Status
from peer.membership.heartbeat import HeartbeatMonitor
from peer.membership.monitors import receivers
from peer.membership.phi import PhiAccrualDetector


def test_the_monitor_watches_its_ring_receivers_and_keeps_their_history():
    members = [f"g{i}" for i in range(8)]
    monitor = HeartbeatMonitor("g0", monitors=3).for_members(members)
    assert set(monitor.receivers) == set(receivers(members, "g0", 3))
    watched = monitor.receivers[0]
    heard = monitor.replied(watched, 1.0).replied(watched, 2.0)
    again = heard.for_members([*members, "g9"])
    if watched in again.receivers:
        assert again.detectors[watched] == heard.detectors[watched]
    assert HeartbeatMonitor("g0").for_members(["g0"]).receivers == ()


def test_only_members_asked_have_a_verdict_and_silence_turns_it():
    monitor = HeartbeatMonitor("a").for_members(["a", "b", "c"]).replied("b", 0.0)
    assert monitor.reachability(0.5) == {"b": True}
    assert monitor.reachability(60.0) == {"b": False}


def test_a_member_that_never_answers_is_judged_from_when_it_was_first_asked():
    monitor = HeartbeatMonitor("a").for_members(["a", "b"]).asked(10.0).asked(11.0)
    assert monitor.first_asked == {"b": 10.0}
    assert monitor.reachability(10.5) == {"b": True}
    assert monitor.reachability(30.0) == {"b": False}
    assert monitor.forgive(10.5, 29.5).reachability(30.0) == {"b": True}
    answered = monitor.replied("b", 30.0)
    assert answered.first_asked == {}
    assert answered.detectors["b"] == PhiAccrualDetector(monitor.settings).heartbeat(30.0)
    assert answered.reachability(30.1) == {"b": True}


def test_forgiving_leaves_the_stall_out_of_the_silence_without_learning_it():
    monitor = HeartbeatMonitor("a").for_members(["a", "b", "c"])
    for t in range(30):
        monitor = monitor.replied("b", float(t))
        monitor = monitor.replied("c", float(t)) if t < 5 else monitor
    forgiven = monitor.forgive(29.1, 80.0)
    assert forgiven.reachability(80.5) == {"b": True, "c": False}, "c was silent before"
    assert forgiven.reachability(80.0 + 30) == {"b": False, "c": False}
    assert forgiven.detectors["b"].history == monitor.detectors["b"].history


def formed(*ids: str) -> Gossip:
    state = Gossip()
    for member in ids:
        state = state.with_member_status(ids[0], member, Status.UP)
    for member in ids:
        state = state.seen_by(member)
    return state


def test_the_downing_clock_starts_at_unreachable_and_stops_at_reachable_again():
    state = formed("a", "b", "c").observe("b", "c", reachable=False)
    downing = AutoDown(after=5.0).seen(state, 10.0).seen(state, 12.0)
    assert downing.since == {"c": 10.0}
    assert downing.due(state, "a", 14.9) == ()
    assert downing.due(state, "a", 15.0) == ("c",)
    assert downing.due(state, "b", 15.0) == ()  # only the leader downs
    healed = state.observe("b", "c", reachable=True)
    assert AutoDown(5.0, downing.since).seen(healed, 16.0).since == {}
    assert AutoDown(None).seen(state, 0.0).due(state, "a", 100.0) == ()
