"""Push-pull gossip's decisions: the reply to a status, the target, the pace."""

from __future__ import annotations

import random

from pyrsistent import pmap

from peer.membership.gossip import Gossip, Member, Status
from peer.membership.pushpull import (
    GossipReply,
    GossipStatus,
    pick_target,
    respond,
    rounds_per_interval,
)

IDS = [f"m{i}" for i in range(10)]
SHARED = Gossip(members=pmap({m: Member(m, Status.UP) for m in IDS}), seen=frozenset(IDS))


def with_seen(state: Gossip, seen: list[str]) -> Gossip:
    """The state with exactly ``seen`` having seen it."""
    return Gossip(state.members, state.reachability, state.version, frozenset(seen))


def test_the_same_state_needs_no_reply():
    assert respond(SHARED, GossipStatus.of("m1", SHARED)) is GossipReply.NOTHING


def test_a_newer_or_concurrent_state_is_sent_and_an_older_one_requested():
    newer = SHARED.with_member_status("m0", "m9", Status.LEAVING)
    concurrent = SHARED.observe("m1", "m8", reachable=False)
    assert respond(newer, GossipStatus.of("m1", SHARED)) is GossipReply.SEND_STATE
    assert respond(SHARED, GossipStatus.of("m0", newer)) is GossipReply.REQUEST_STATE
    assert respond(newer, GossipStatus.of("m1", concurrent)) is GossipReply.SEND_STATE


def test_an_equal_version_seen_by_others_is_sent():
    mine = with_seen(SHARED, ["m0", "m1"])
    theirs = with_seen(SHARED, ["m0"])
    assert respond(mine, GossipStatus.of("m2", theirs)) is GossipReply.SEND_STATE


def test_one_alone_has_no_target():
    assert pick_target(SHARED, "m0", ["m0"], random.Random(1)) is None


def test_targets_are_live_members_other_than_me():
    rng = random.Random(3)
    live = ["m0", "m1", "m2"]
    picks = {pick_target(SHARED, "m0", live, rng) for _ in range(100)}
    assert picks == {"m1", "m2"}


def picks_of_unseen(state: Gossip, bias: float) -> float:
    """The share of 2,000 seeded picks by m0 that go to members that have not seen the state."""
    rng = random.Random(11)
    picks = [pick_target(state, "m0", IDS, rng, unseen_bias=bias) for _ in range(2_000)]
    return sum(pick not in state.seen for pick in picks) / len(picks)


def test_picks_favour_members_that_have_not_seen_the_state():
    # Two of the nine others have not seen it: a uniform pick finds them 22% of the time, a
    # biased one 0.8 + 0.2 * 2/9 = 84%.
    state = with_seen(SHARED.with_member_status("m0", "m5", Status.LEAVING), IDS[:8])
    assert picks_of_unseen(state, bias=0.8) > 0.75
    assert picks_of_unseen(state, bias=0.0) < 0.35


def test_rounds_are_three_while_fewer_than_half_have_seen_the_version():
    changed = SHARED.with_member_status("m0", "m9", Status.LEAVING)
    assert rounds_per_interval(with_seen(changed, IDS[:4])) == 3
    assert rounds_per_interval(with_seen(changed, IDS[:5])) == 1
    assert rounds_per_interval(SHARED) == 1


def test_downed_members_do_not_count_for_the_pace():
    downed = SHARED
    for member in IDS[5:]:
        downed = downed.with_member_status("m0", member, Status.DOWN)
    assert rounds_per_interval(with_seen(downed, IDS[:2])) == 3
    assert rounds_per_interval(with_seen(downed, IDS[:3])) == 1
