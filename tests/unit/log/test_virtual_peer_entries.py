"""add-virtual-peer and leave-cluster: virtual peers come and go within their group."""

from __future__ import annotations

import pytest

from peer.log.apply import apply_entry
from peer.log.entries.group_leave import GROUP_LEAVE
from peer.log.entries.join import ACCEPT_JOIN
from peer.log.entries.virtual_peers import ADD_VIRTUAL_PEER, LEAVE_CLUSTER
from peer.log.replica import Replica


def add(peer, group, position):
    return ADD_VIRTUAL_PEER.entry(id=peer, group=group).at(position)


def leave(peer, group, position):
    return LEAVE_CLUSTER.entry(id=peer, group=group).at(position)


# add-virtual-peer


def with_short_ids(replica, *peers):
    """Each added peer takes the next short id, the small integer it is known by on the wire."""
    ids = {p: i for i, p in enumerate(peers)}
    return replica.evolve(short_ids=replica.short_ids.update(ids), next_short_id=len(peers))


def test_add_to_joined_group_makes_an_active_peer(make_replica, reactions, effects):
    before = make_replica(3, ring=["a", "b"], group_peers={"b": ["b1"]})
    t = apply_entry(before, add("a1", "a", 4))
    expected = make_replica(4, ring=["a", "b"], group_peers={"a": ["a1"], "b": ["b1"]})
    assert t.new == with_short_ids(expected, "a1")
    assert t.new.peers == ["a1", "b1"]
    assert t.new.orphaned == {}
    assert t.diff == {"peer": "a1", "group": "a"}
    assert reactions(t, "a", "b") == {"a": (), "b": ()}
    assert effects(t, "a", "b") == {"a": [], "b": []}


def test_add_grows_the_group_set(make_replica):
    before = make_replica(3, ring=["a"], group_peers={"a": ["a1"]})
    t = apply_entry(before, add("a2", "a", 4))
    assert t.new == with_short_ids(
        make_replica(4, ring=["a"], group_peers={"a": ["a1", "a2"]}), "a2"
    )
    assert t.new.peers == ["a1", "a2"]


@pytest.mark.parametrize("joins", [{}, {"prepared": {"a": "j"}}, {"accepted": {"a": "j"}}])
def test_add_to_group_not_yet_joined_orphans_the_peer(make_replica, reactions, effects, joins):
    before = make_replica(3, ring=["a"], **joins)
    t = apply_entry(before, add("j1", "j", 4))
    expected = make_replica(4, ring=["a"], **joins, group_peers={"j": ["j1"]})
    assert t.new == with_short_ids(expected, "j1")
    assert t.new.peers == []
    assert t.new.orphaned == {"j": ["j1"]}
    assert t.diff == {"peer": "j1", "group": "j"}
    assert reactions(t, "j", "a") == {"j": (), "a": ()}
    assert effects(t, "j", "a") == {"j": [], "a": []}


def test_orphaned_peer_becomes_active_when_its_group_joins(make_replica):
    before = make_replica(3, ring=["a"], accepted={"a": "j"}, group_peers={"j": ["j1"]})
    t = apply_entry(before, ACCEPT_JOIN.entry(joiner="j", watcher="a").at(4))
    assert t.new.peers == ["j1"]
    assert t.new.orphaned == {}


NOOP_ADDS = {
    "left-group": ({"left": ["g"]}, {}),
    "duplicate": ({"group_peers": {"g": ["g1"]}}, {"g": ["g1"]}),
}


@pytest.mark.parametrize(("extra", "orphaned"), NOOP_ADDS.values(), ids=NOOP_ADDS)
def test_add_that_changes_nothing_is_a_no_op(make_replica, reactions, effects, extra, orphaned):
    before = make_replica(3, ring=["a"], **extra)
    t = apply_entry(before, add("g1", "g", 4))
    assert t.new == before.evolve(version=4)
    assert t.new.orphaned == orphaned
    assert t.diff is None
    assert reactions(t, "g", "a") == {"g": (), "a": ()}
    assert effects(t, "g", "a") == {"g": [], "a": []}


# leave-cluster


def test_leave_removes_the_peer_and_its_group_replaces_it(make_replica, reactions, effects):
    before = make_replica(5, ring=["a", "b"], group_peers={"a": ["a1", "a2"], "b": ["b1"]})
    t = apply_entry(before, leave("a1", "a", 6))
    assert t.new == make_replica(6, ring=["a", "b"], group_peers={"a": ["a2"], "b": ["b1"]})
    assert t.new.peers == ["a2", "b1"]
    assert t.diff == {"peer": "a1", "group": "a"}
    assert reactions(t, "a", "b") == {"a": (), "b": ()}
    assert effects(t, "a", "b") == {"a": [("restart_virtual_peer", "a1")], "b": []}


def test_leave_of_last_peer_keeps_an_empty_group_entry(make_replica, effects):
    before = make_replica(5, groups=["a"], group_peers={"j": ["j1"]})
    t = apply_entry(before, leave("j1", "j", 6))
    assert t.new == make_replica(6, groups=["a"], group_peers={"j": []})
    assert t.new.orphaned == {"j": []}
    assert effects(t, "j", "a") == {"j": [("restart_virtual_peer", "j1")], "a": []}


NOOP_LEAVES = {
    "unknown-group": {},
    "peer-of-other-group": {"group_peers": {"b": ["a1"]}},
    "already-removed": {"group_peers": {"a": ["a2"]}},
}


@pytest.mark.parametrize("extra", NOOP_LEAVES.values(), ids=NOOP_LEAVES)
def test_leave_of_unknown_peer_is_a_no_op(make_replica, reactions, effects, extra):
    before = make_replica(5, ring=["a", "b"], **extra)
    t = apply_entry(before, leave("a1", "a", 6))
    assert t.new == before.evolve(version=6)
    assert t.diff is None
    assert reactions(t, "a", "b") == {"a": (), "b": ()}
    assert effects(t, "a", "b") == {"a": [], "b": []}


def test_duplicate_leave_replaces_the_peer_once(make_replica, effects):
    first = apply_entry(make_replica(5, ring=["a"], group_peers={"a": ["a1"]}), leave("a1", "a", 6))
    second = apply_entry(first.new, leave("a1", "a", 7))
    assert second.new == first.new.evolve(version=7)
    assert effects(first, "a") == {"a": [("restart_virtual_peer", "a1")]}
    assert effects(second, "a") == {"a": []}


# a peer's own site: the peers of a member's worker processes listen apart from their member


def add_at(peer, group, position, peer_site, site="M"):
    return ADD_VIRTUAL_PEER.entry(id=peer, group=group, site=site, peer_site=peer_site).at(position)


def test_a_peer_with_a_site_of_its_own_is_found_there(make_replica):
    before = make_replica(3, ring=["a", "m"])
    t = apply_entry(before, add_at("m1", "m", 4, "W1"))
    assert t.new.sites == {"m": "M"}
    assert t.new.peer_sites == {"m1": "W1"}
    assert t.new.site_of("m1", "m") == "W1"


def test_a_peer_at_its_groups_site_keeps_no_site_of_its_own(make_replica):
    t = apply_entry(make_replica(3, ring=["m"]), add_at("m1", "m", 4, "M"))
    assert t.new.peer_sites == {}
    assert t.new.site_of("m1", "m") == "M"


def test_a_repeated_announcement_does_not_move_a_peer(make_replica):
    first = apply_entry(make_replica(3, ring=["m"]), add_at("m1", "m", 4, "W1"))
    second = apply_entry(first.new, add_at("m1", "m", 5, "W2"))
    assert second.new.peer_sites == {"m1": "W1"}


def test_a_peer_that_leaves_takes_its_site_along(make_replica):
    before = apply_entry(make_replica(3, ring=["m"]), add_at("m1", "m", 4, "W1")).new
    before = apply_entry(before, add_at("m2", "m", 5, "W2")).new
    t = apply_entry(before, leave("m1", "m", 6))
    assert t.new.peer_sites == {"m2": "W2"}


def test_a_group_that_leaves_takes_its_peers_sites_along(make_replica):
    before = apply_entry(make_replica(3, ring=["a", "m"]), add_at("m1", "m", 4, "W1")).new
    before = apply_entry(before, add_at("a1", "a", 5, "A1", site="A")).new
    t = apply_entry(before, GROUP_LEAVE.entry(id="m").at(6))
    assert t.new.peer_sites == {"a1": "A1"}
    assert t.new.to_json()["peer_sites"] == {"a1": "A1"}
    assert Replica.from_json(t.new.to_json()) == t.new


def test_a_peer_site_that_is_not_a_string_is_refused(make_replica):
    before = make_replica(3, ring=["m"])
    t = apply_entry(before, ADD_VIRTUAL_PEER.entry(id="m1", group="m", peer_site=7).at(4))
    assert t.new == before.evolve(version=4)
