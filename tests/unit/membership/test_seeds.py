"""Seed nodes: reading sites, the schedule of a new member's join requests, and how a seed's
welcome reaches a new member's agent."""

from __future__ import annotations

import re

import pytest

from peer.membership.agent import (
    HeartbeatRequest,
    InitJoin,
    MembershipAgent,
    MembershipSettings,
    State,
    Welcome,
)
from peer.membership.gossip import Status
from peer.membership.pushpull import GossipStatus
from peer.membership.seeds import SeedContact, parse_seed_nodes, parse_site
from peer.membership.vclock import Order


@pytest.mark.parametrize("site", ["h:1", "10.0.0.5:40123", "a-b.example.org:65535", "[::1]:9"])
def test_a_site_is_a_host_and_a_port(site):
    assert parse_site(site) == site


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("host", "has no port"),
        (":40123", "has no host"),
        ("host:", "'' is not a port"),
        ("host:0", "'0' is not a port"),
        ("host:65536", "'65536' is not a port"),
        ("host:12x", "'12x' is not a port"),
        ("host:\uff11\uff12", "is not a port"),
        ("ho st:1", "'ho st' is not a host"),
        ("[::1:1", "is not a host"),
    ],
)
def test_a_bad_site_is_refused_saying_why(text, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        parse_site(text)


def test_seed_nodes_are_a_comma_separated_list_without_repeats():
    assert parse_seed_nodes("a:1, b:2,a:1") == ("a:1", "b:2")
    with pytest.raises(ValueError, match="'' has no port"):
        parse_seed_nodes("a:1,")


def test_every_seed_is_asked_each_retry_until_the_deadline_then_reported_once():
    contact = SeedContact(("s1:1", "s2:2"), retry=0.25, timeout=1.0)
    asked = [t / 10 for t in range(0, 20) if contact.due(t / 10)]
    assert asked == [0.0, 0.3, 0.6, 0.9]
    assert contact.silent(0.9) == ()
    assert contact.silent(1.0) == ("s1:1", "s2:2")
    assert contact.silent(1.5) == ()
    assert contact.due(1.5) == ()
    assert not contact.answered(), "a welcome after the deadline is not the one reported"


def test_the_first_answer_ends_the_asking_and_nothing_is_reported_silent():
    contact = SeedContact(("s1:1",), retry=0.25, timeout=1.0)
    assert contact.due(0.0) == ("s1:1",)
    assert contact.answered()
    assert not contact.answered()
    assert contact.due(0.5) == ()
    assert contact.silent(2.0) == ()


def test_without_seeds_nothing_is_asked_or_reported():
    contact = SeedContact((), retry=0.25)
    assert contact.due(0.0) == ()
    assert contact.silent(100.0) == ()
    assert not contact.answered()


def running(me: str, others: list[str], site: str) -> MembershipAgent:
    """An agent whose log says ``others`` are up, each at site SITE-<id>, and ``me`` at ``site``."""
    agent = MembershipAgent(me, MembershipSettings(), site)
    members = [me, *others]
    agent.sync(dict.fromkeys(members, Status.UP), {m: f"site-{m}:1" for m in members})
    return agent


def test_a_seed_welcomes_a_joiner_at_the_site_it_gave_with_its_state_and_the_sites_it_knows():
    seed = running("s", ["t"], "site-s:1")
    outbox = seed.receive(InitJoin("new", "new-host:7"), 1.0)
    [(to, welcome)] = outbox.sends
    assert to == "new"
    assert seed.sites["new"] == "new-host:7"
    assert welcome == Welcome("s", seed.gossip, (("s", "site-s:1"), ("t", "site-t:1")))


def test_a_seed_not_in_its_log_yet_names_its_own_site():
    seed = MembershipAgent("s", MembershipSettings(), "here:5")
    [(_, welcome)] = seed.receive(InitJoin("new", "new-host:7"), 1.0).sends
    assert welcome.sites == (("s", "here:5"),)


def test_a_welcome_is_merged_as_gossip_and_gives_the_sites_the_new_member_lacks():
    seed = running("s", ["t", "u"], "site-s:1")
    newcomer = MembershipAgent("new", MembershipSettings(), "new-host:7")
    newcomer.sync({}, {"u": "u-from-the-log:9"})
    [(_, welcome)] = seed.receive(InitJoin("new", "new-host:7"), 1.0).sends
    outbox = newcomer.receive(welcome, 1.1)
    assert set(newcomer.gossip.members) == {"new", "s", "t", "u"}
    assert newcomer.gossip.version.compare(seed.gossip.version) is Order.AFTER
    assert newcomer.sites == {"s": "site-s:1", "t": "site-t:1", "u": "u-from-the-log:9"}
    assert outbox.sends == (("s", State("new", newcomer.gossip)),), "the merge goes back"
    receivers = newcomer.tick(1.2).sends
    assert {to for to, m in receivers if isinstance(m, HeartbeatRequest)} == {"s", "t", "u"}
    assert any(isinstance(m, GossipStatus) for _, m in receivers)


def test_learned_sites_give_way_to_the_log_and_go_with_their_members():
    newcomer = MembershipAgent("new", MembershipSettings(), "new-host:7")
    seed = running("s", ["t"], "site-s:1")
    newcomer.receive(seed.receive(InitJoin("new", "new-host:7"), 1.0).sends[0][1], 1.1)
    statuses = {"new": Status.UP, "s": Status.UP, "t": Status.DOWN}
    newcomer.sync(statuses, {"s": "s-moved:2"})
    assert newcomer.sites == {"s": "s-moved:2"}


def test_a_joiner_s_site_is_dropped_at_the_next_sync_unless_gossip_knows_it_alive():
    seed = running("s", [], "site-s:1")
    seed.receive(InitJoin("gone", "gone-host:7"), 1.0)
    seed.receive(InitJoin("new", "new-host:7"), 1.0)
    seed.receive(State("new", MembershipAgent("new").gossip), 1.1)
    seed.sync({"s": Status.UP}, {"s": "site-s:1"})
    assert seed.sites == {"new": "new-host:7", "s": "site-s:1"}
