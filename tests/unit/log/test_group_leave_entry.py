"""group-leave-cluster: the ring closes over the departed group, and joins that depended on it
are aborted."""

from __future__ import annotations

import pytest

from peer.log.apply import apply_entry
from peer.log.entries.group_leave import GROUP_LEAVE
from peer.log.entries.join import ABORT_JOIN
from peer.log.replica import invariant_violations, ring_cycle


def leave(group, position):
    return GROUP_LEAVE.entry(id=group).at(position)


def test_leave_closes_the_ring_over_the_departed_group(make_replica, reactions, effects):
    before = make_replica(
        9, ring=["w", "f", "z", "b"], group_peers={"f": ["f1"], "w": ["w1"]}, aborted=["k"]
    )
    t = apply_entry(before, leave("f", 10))
    assert t.new == make_replica(
        10, ring=["w", "z", "b"], left=["f"], group_peers={"w": ["w1"]}, aborted=["k"]
    )
    assert t.new.pairs == {"w": "z", "z": "b", "b": "w"}
    assert invariant_violations(t.new) == []
    assert t.diff == {"left": "f", "watcher": "w", "target": "z", "stranded": [], "exited": False}
    assert reactions(t, "f", "w", "z", "b") == dict.fromkeys("fwzb", ())
    assert effects(t, "f", "w", "z", "b") == {
        "f": [("restart_group",)],
        "w": [],
        "z": [],
        "b": [],
    }


def test_leave_from_ring_of_three_leaves_a_two_cycle(make_replica):
    t = apply_entry(make_replica(4, ring=["w", "f", "z"]), leave("f", 5))
    assert t.new == make_replica(5, ring=["w", "z"], left=["f"])
    assert t.new.pairs == {"w": "z", "z": "w"}


def test_leave_from_ring_of_two_leaves_a_lone_group(make_replica, reactions, effects):
    t = apply_entry(make_replica(4, ring=["a", "b"]), leave("b", 5))
    assert t.new == make_replica(5, ring=["a"], left=["b"])
    assert t.new.pairs == {}
    assert ring_cycle(t.new) == ["a"]
    assert t.diff == {"left": "b", "watcher": "a", "target": "a", "stranded": [], "exited": False}
    assert reactions(t, "a", "b") == {"a": (), "b": ()}
    assert effects(t, "a", "b") == {"a": [], "b": [("restart_group",)]}


def test_leave_of_lone_group_empties_the_cluster(make_replica, effects):
    t = apply_entry(make_replica(4, ring=["a"], group_peers={"a": ["a1"]}), leave("a", 5))
    assert t.new == make_replica(5, left=["a"])
    assert t.diff == {"left": "a", "watcher": None, "target": None, "stranded": [], "exited": False}
    assert effects(t, "a") == {"a": [("restart_group",)]}


@pytest.mark.parametrize("joins", ["prepared", "accepted"])
def test_leave_of_a_watcher_strands_its_joiner(make_replica, reactions, effects, joins):
    before = make_replica(6, ring=["a", "w", "b"], **{joins: {"w": "j", "b": "k"}})
    t = apply_entry(before, leave("w", 7))
    assert t.new == make_replica(
        7, ring=["a", "b"], **{joins: {"b": "k"}}, aborted=["j"], left=["w"]
    )
    assert t.diff == {
        "left": "w", "watcher": "a", "target": "b", "stranded": ["j"], "exited": False
    }  # fmt: skip
    assert reactions(t, "j", "k", "a", "b", "w") == {
        "j": (ABORT_JOIN.entry(id="j"),),
        "k": (),
        "a": (),
        "b": (),
        "w": (),
    }
    assert effects(t, "j", "k", "a", "b", "w") == {
        "j": [],
        "k": [],
        "a": [],
        "b": [],
        "w": [("restart_group",)],
    }


@pytest.mark.parametrize("joins", ["prepared", "accepted"])
def test_leave_of_a_joining_group_drops_its_join(make_replica, reactions, effects, joins):
    before = make_replica(
        6, ring=["a", "b"], **{joins: {"a": "j"}}, group_peers={"j": ["j1"], "a": ["a1"]}
    )
    t = apply_entry(before, leave("j", 7))
    assert t.new == make_replica(7, ring=["a", "b"], left=["j"], group_peers={"a": ["a1"]})
    assert t.new.orphaned == {}
    assert t.diff == {"left": "j", "watcher": None, "target": None, "stranded": [], "exited": False}
    assert reactions(t, "j", "a", "b") == dict.fromkeys("jab", ())
    assert effects(t, "j", "a", "b") == {"j": [("restart_group",)], "a": [], "b": []}


def test_leave_of_group_known_only_by_its_peers(make_replica, effects):
    before = make_replica(2, ring=["a"], aborted=["g"], group_peers={"g": ["g1", "g2"]})
    t = apply_entry(before, leave("g", 3))
    assert t.new == make_replica(3, ring=["a"], left=["g"])
    assert t.diff == {"left": "g", "watcher": None, "target": None, "stranded": [], "exited": False}
    assert effects(t, "g", "a") == {"g": [("restart_group",)], "a": []}


UNKNOWN = {
    "never-seen": {},
    "already-left": {"left": ["g"]},
    "only-aborted": {"aborted": ["g"]},
}


@pytest.mark.parametrize("extra", UNKNOWN.values(), ids=UNKNOWN)
def test_leave_of_unknown_group_is_a_no_op(make_replica, reactions, effects, extra):
    before = make_replica(2, ring=["a", "b"], **extra)
    t = apply_entry(before, leave("g", 3))
    assert t.new == before.evolve(version=3)
    assert t.diff is None
    assert reactions(t, "g", "a", "b") == dict.fromkeys("gab", ())
    assert effects(t, "g", "a", "b") == {key: [] for key in "gab"}
