"""The replica value: JSON form, derived views, the ring and the structural invariants."""

from __future__ import annotations

import json

import pytest
from pyrsistent import pmap, pset

from peer.log.replica import Replica, invariant_violations, ring_cycle


@pytest.fixture
def sample(make_replica):
    return make_replica(
        17,
        ring=["c", "a", "b"],
        prepared={"a": "j"},
        accepted={"b": "k"},
        aborted=["m"],
        left=["x"],
        group_peers={"a": ["a2", "a1"], "j": ["j1"], "c": [], "k": ["k1"]},
    )


def test_to_json_is_plain_and_sorted(sample):
    assert sample.to_json() == {
        "key_versions": {},
        "version": 17,
        "groups": ["a", "b", "c"],
        "peers": ["a1", "a2"],
        "pairs": {"a": "b", "b": "c", "c": "a"},
        "prepared": {"a": "j"},
        "accepted": {"b": "k"},
        "aborted": ["m"],
        "left": ["x"],
        "leaving": [],
        "exiting": [],
        "removed": [],
        "orphaned": {"j": ["j1"], "k": ["k1"]},
        "group_peers": {"a": ["a1", "a2"], "c": [], "j": ["j1"], "k": ["k1"]},
        "sites": {},
        "peer_sites": {},
        "group_tags": {},
        "rumor_takers": [],
        "job_scheduler": "balanced",
        "jobs": {},
        "job_order": [],
        "finished": {},
        "reasons": {},
        "hashes": {},
        "names": {},
        "submitted": {},
        "allocations": {},
        "allocation_versions": {},
        "started": [],
        "done": {},
        "standbys": {},
        "takeovers": {},
        "recovering": {},
        "rollbacks": {},
        "held_back": [],
        "growing": [],
        "short_ids": {},
        "next_short_id": 0,
    }
    assert list(sample.to_json()["pairs"]) == ["a", "b", "c"]


def test_json_round_trip(sample):
    assert Replica.from_json(sample.to_json()) == sample
    assert Replica.from_json(json.loads(json.dumps(sample.to_json()))) == sample


def test_local_recovery_keys_round_trip(sample):
    recovering = sample.evolve(
        standbys=pmap({"j": pmap({"a1": "b1"})}),
        takeovers=pmap({"j": pmap({"s2": "f", "s": "g"})}),
        recovering=pmap({"j": pset(["s2", "s"])}),
    )
    doc = recovering.to_json()
    assert (doc["standbys"], doc["takeovers"], doc["recovering"]) == (
        {"j": {"a1": "b1"}},
        {"j": {"s": "g", "s2": "f"}},
        {"j": ["s", "s2"]},
    )
    assert Replica.from_json(json.loads(json.dumps(doc))) == recovering


def test_empty_replica_round_trip():
    assert Replica().to_json()["version"] == -1
    assert Replica.from_json(Replica().to_json()) == Replica()
    assert Replica.from_json({}) == Replica()


def test_from_json_ignores_derived_keys(make_replica):
    doc = {"version": 3, "groups": ["a"], "peers": ["bogus"], "orphaned": {"z": ["z1"]}}
    assert Replica.from_json(doc) == make_replica(3, ring=["a"])


def test_from_json_converts_ids_to_strings(make_replica):
    doc = {"version": "4", "groups": [1], "pairs": {}, "group_peers": {2: [3]}}
    assert Replica.from_json(doc) == make_replica(4, groups=["1"], group_peers={"2": ["3"]})


def test_from_json_refuses_unknown_keys():
    with pytest.raises(ValueError, match=r"^replica document has unknown keys: \['w', 'x'\]$"):
        Replica.from_json({"version": 1, "x": 1, "w": {}})


def test_peers_are_the_sorted_peers_of_joined_groups_only(sample):
    assert sample.peers == ["a1", "a2"]
    assert sample.orphaned == {"j": ["j1"], "k": ["k1"]}


def test_joining_maps_joiners_to_their_watchers(sample):
    assert sample.joining() == {"j": "a", "k": "b"}


def test_watcher_of(sample):
    assert [sample.watcher_of(g) for g in ("a", "b", "c", "j")] == ["c", "a", "b", None]


def test_evolve_returns_a_new_value(sample):
    changed = sample.evolve(version=18)
    assert (sample.version, changed.version) == (17, 18)
    assert changed == Replica.from_json({**sample.to_json(), "version": 18})


RINGS = {
    "empty": ({}, []),
    "lone": ({"ring": ["a"]}, ["a"]),
    "lone-with-pair": ({"ring": ["a"], "pairs": {"a": "a"}}, None),
    "pair-without-groups": ({"pairs": {"a": "b"}}, None),
    "two": ({"ring": ["b", "a"]}, ["a", "b"]),
    "starts-at-smallest": ({"ring": ["d", "b", "c", "a"]}, ["a", "d", "b", "c"]),
    "group-without-pair": ({"ring": ["a", "b"], "groups": ["c"]}, None),
    "pair-from-non-group": ({"ring": ["a", "b"], "pairs": {"x": "a"}}, None),
    "two-cycles": ({"groups": "abcd", "pairs": {"a": "b", "b": "a", "c": "d", "d": "c"}}, None),
    "tail-into-cycle": ({"groups": "abc", "pairs": {"a": "b", "b": "c", "c": "b"}}, None),
}


@pytest.mark.parametrize(("shape", "cycle"), RINGS.values(), ids=RINGS)
def test_ring_cycle(make_replica, shape, cycle):
    assert ring_cycle(make_replica(**shape)) == cycle


def test_pair_to_non_group_is_reported_not_raised(make_replica):
    replica = make_replica(groups="ab", pairs={"a": "x", "b": "a"})
    assert ring_cycle(replica) is None
    assert invariant_violations(replica) == [
        "pair a->x names a group that has not joined",
        "no join is in flight but the pairs are not one ring over the groups",
    ]


def test_healthy_replicas_have_no_violations(sample, make_replica):
    assert invariant_violations(sample) == []
    assert invariant_violations(make_replica()) == []
    assert invariant_violations(make_replica(ring=["a"], left=["b"])) == []


VIOLATIONS = {
    "pair-to-non-group": (
        {"ring": ["a"], "pairs": {"a": "x"}},
        [
            "pair a->x names a group that has not joined",
            "no join is in flight but the pairs are not one ring over the groups",
        ],
    ),
    "self-watch": (
        {"ring": ["a"], "pairs": {"a": "a"}},
        [
            "group a watches itself",
            "no join is in flight but the pairs are not one ring over the groups",
        ],
    ),
    "prepared-joiner-joined": (
        {"ring": ["a", "b"], "prepared": {"a": "b"}},
        ["prepared joiner b has already joined"],
    ),
    "accepted-self": (
        {"ring": ["a", "b"], "accepted": {"a": "a"}},
        ["accepted joiner a has already joined", "accepted joiner a watches itself"],
    ),
    "joins-twice": (
        {"ring": ["a", "b"], "prepared": {"a": "j"}, "accepted": {"b": "j"}},
        ["a group joins twice at once: ['j', 'j']"],
    ),
    "joined-and-left": (
        {"ring": ["a", "b"], "left": ["b", "c"]},
        ["groups both joined and left: ['b']"],
    ),
    "broken-ring": (
        {"groups": "abc", "pairs": {"a": "b", "b": "a"}},
        ["no join is in flight but the pairs are not one ring over the groups"],
    ),
}


@pytest.mark.parametrize(("shape", "problems"), VIOLATIONS.values(), ids=VIOLATIONS)
def test_invariant_violations(make_replica, shape, problems):
    assert invariant_violations(make_replica(**shape)) == problems


def test_broken_ring_is_tolerated_while_a_join_is_in_flight(make_replica):
    replica = make_replica(groups="abc", pairs={"a": "b", "b": "a"}, prepared={"a": "j"})
    assert invariant_violations(replica) == []
