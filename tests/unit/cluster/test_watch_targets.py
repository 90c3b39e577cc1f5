"""watch_targets: which pulses a group watches, derived from the replica alone."""

from __future__ import annotations

import pytest
from pyrsistent import pmap, pset

from peer.cluster.ring import watch_targets
from peer.log.replica import Replica


def replica(ring=(), prepared=None, accepted=None, left=(), aborted=()):
    """Joined groups in ring order (no pairs for a lone group), plus joins in flight."""
    ring = list(ring)
    pairs = dict(zip(ring, [*ring[1:], *ring[:1]], strict=True)) if len(ring) > 1 else {}
    return Replica(
        groups=pset(ring),
        pairs=pmap(pairs),
        prepared=pmap(prepared or {}),
        accepted=pmap(accepted or {}),
        left=pset(left),
        aborted=pset(aborted),
    )


def targets(r, *groups):
    return {g: watch_targets(r, g) for g in groups}


def test_joined_groups_watch_their_ring_successor():
    assert targets(replica("abc"), "a", "b", "c") == {
        "a": frozenset("b"),
        "b": frozenset("c"),
        "c": frozenset("a"),
    }


def test_two_groups_watch_each_other():
    assert targets(replica("ab"), "a", "b") == {"a": frozenset("b"), "b": frozenset("a")}


def test_lone_group_watches_nothing():
    assert watch_targets(replica("a"), "a") == frozenset()


def test_empty_cluster_watches_nothing():
    assert watch_targets(replica(), "a") == frozenset()


def test_result_is_a_frozenset():
    assert type(watch_targets(replica("ab"), "a")) is frozenset


def test_prepared_join_watcher_and_joiner_watch_each_other():
    r = replica("abc", prepared={"a": "j"})
    assert targets(r, "a", "j", "b", "c") == {
        "a": frozenset({"b", "j"}),
        "j": frozenset({"a"}),
        "b": frozenset({"c"}),
        "c": frozenset({"a"}),
    }


def test_accepted_joiner_watches_its_watchers_target():
    r = replica("abc", accepted={"a": "j"})
    assert targets(r, "a", "j", "b") == {
        "a": frozenset({"b", "j"}),
        "j": frozenset({"b"}),
        "b": frozenset({"c"}),
    }


def test_lone_group_stitching_a_joiner():
    assert targets(replica("a", prepared={"a": "j"}), "a", "j") == {
        "a": frozenset({"j"}),
        "j": frozenset({"a"}),
    }
    assert targets(replica("a", accepted={"a": "j"}), "a", "j") == {
        "a": frozenset({"j"}),
        "j": frozenset({"a"}),
    }


def test_two_joins_in_flight():
    r = replica("abcd", prepared={"a": "j"}, accepted={"c": "k"})
    assert targets(r, "a", "c", "j", "k") == {
        "a": frozenset({"b", "j"}),
        "c": frozenset({"d", "k"}),
        "j": frozenset({"a"}),
        "k": frozenset({"d"}),
    }


@pytest.mark.parametrize("extra", [{}, {"left": ["g"]}, {"aborted": ["g"]}])
def test_unknown_left_or_aborted_group_watches_nothing(extra):
    assert watch_targets(replica("ab", **extra), "g") == frozenset()


def test_never_watches_itself():
    r = Replica(groups=pset("a"), pairs=pmap({"a": "a"}))
    assert watch_targets(r, "a") == frozenset()
