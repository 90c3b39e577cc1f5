"""prepare-, notify-, accept- and abort-join-cluster: replica before, entry, replica after, diff,
and what each actor (joiner, watcher, bystander) appends and does."""

from __future__ import annotations

import pytest

from peer.log.apply import apply_entry
from peer.log.entries.group_leave import GROUP_LEAVE
from peer.log.entries.join import (
    ABORT_JOIN,
    ACCEPT_JOIN,
    NOTIFY_JOIN,
    PREPARE_JOIN,
    disallowed_watchers,
)
from peer.log.replica import invariant_violations, ring_cycle


def prepare(joiner, position):
    return PREPARE_JOIN.entry(joiner=joiner).at(position)


def notify(joiner, watcher, position):
    return NOTIFY_JOIN.entry(joiner=joiner, watcher=watcher).at(position)


def accept(joiner, watcher, position):
    return ACCEPT_JOIN.entry(joiner=joiner, watcher=watcher).at(position)


def abort(group, position):
    return ABORT_JOIN.entry(id=group).at(position)


# prepare-join-cluster


def test_prepare_on_empty_cluster_joins_instantly(make_replica, reactions, effects):
    before = make_replica(0, aborted=["j"], group_peers={"j": ["j1"]})
    t = apply_entry(before, prepare("j", 1))
    assert t.new == make_replica(1, groups=["j"], group_peers={"j": ["j1"]})
    assert t.diff == {"instant_join": "j"}
    assert ring_cycle(t.new) == ["j"]
    assert t.new.peers == ["j1"]
    assert reactions(t, "j", "z") == {"j": (), "z": ()}
    assert effects(t, "j", "z") == {"j": [], "z": []}


@pytest.mark.parametrize(("position", "watcher"), [(3, "a"), (4, "b"), (5, "c"), (9, "a")])
def test_prepare_picks_sorted_candidates_at_position_modulo_count(
    make_replica, reactions, effects, position, watcher
):
    before = make_replica(position - 1, ring=["c", "a", "b"], aborted=["j"])
    t = apply_entry(before, prepare("j", position))
    assert t.new == make_replica(position, ring=["c", "a", "b"], prepared={watcher: "j"})
    assert t.diff == {"watcher": watcher, "joiner": "j"}
    bystanders = sorted({"a", "b", "c"} - {watcher})
    assert reactions(t, "j", watcher, *bystanders) == {
        "j": (),
        watcher: (NOTIFY_JOIN.entry(joiner="j", watcher=watcher),),
        **dict.fromkeys(bystanders, ()),
    }
    assert effects(t, "j", "a", "b", "c") == {key: [] for key in "jabc"}


def test_disallowed_watchers_are_busy_groups_and_watchers_of_prepared_ones(make_replica):
    replica = make_replica(ring=["a", "b", "c", "d", "e"], prepared={"c": "k"}, accepted={"e": "m"})
    assert disallowed_watchers(replica) == {"b", "c", "e"}


@pytest.mark.parametrize("position", [6, 7])
def test_prepare_only_considers_free_watchers(make_replica, reactions, position):
    before = make_replica(5, ring=["a", "b", "c", "d"], prepared={"b": "k"}, accepted={"d": "m"})
    t = apply_entry(before, prepare("j", position))
    assert t.new == before.evolve(version=position, prepared=before.prepared.set("c", "j"))
    assert t.diff == {"watcher": "c", "joiner": "j"}
    assert reactions(t, "c", "a", "j") == {
        "c": (NOTIFY_JOIN.entry(joiner="j", watcher="c"),),
        "a": (),
        "j": (),
    }


def test_prepare_with_every_candidate_busy_aborts(make_replica, reactions, effects):
    before = make_replica(4, ring=["a", "b"], prepared={"a": "k"})
    t = apply_entry(before, prepare("j", 5))
    assert t.new == make_replica(5, ring=["a", "b"], prepared={"a": "k"}, aborted=["j"])
    assert t.diff is None
    assert reactions(t, "j", "a", "b", "k") == {
        "j": (ABORT_JOIN.entry(id="j"),),
        "a": (),
        "b": (),
        "k": (),
    }
    assert effects(t, "j", "a", "b", "k") == {
        "j": [("report_if_dead", "a"), ("report_if_dead", "b")],
        "a": [],
        "b": [],
        "k": [],
    }


def test_prepare_on_lone_busy_group_aborts_and_probes_it(make_replica, reactions, effects):
    before = make_replica(4, ring=["a"], accepted={"a": "k"})
    t = apply_entry(before, prepare("j", 5))
    assert t.new == before.evolve(version=5, aborted=before.aborted.add("j"))
    assert reactions(t, "j", "a") == {"j": (ABORT_JOIN.entry(id="j"),), "a": ()}
    assert effects(t, "j", "a") == {"j": [("report_if_dead", "a")], "a": []}


@pytest.mark.parametrize("joins", [{"prepared": {"a": "j"}}, {"accepted": {"a": "j"}}])
def test_duplicate_prepare_while_joining_changes_nothing(make_replica, reactions, joins):
    before = make_replica(6, ring=["a", "b", "c"], **joins)
    t = apply_entry(before, prepare("j", 7))
    assert t.new == before.evolve(version=7)
    assert t.diff is None
    assert reactions(t, "j", "a", "b", "c") == dict.fromkeys("jabc", ())


def test_duplicate_prepare_while_joining_probes_nobody(make_replica, reactions, effects):
    before = make_replica(6, ring=["a", "b", "c"], prepared={"a": "j"})
    t = apply_entry(before, prepare("j", 7))
    assert t.new == before.evolve(version=7)
    assert reactions(t, "j", "a", "b", "c") == dict.fromkeys("jabc", ())
    assert effects(t, "j", "a", "b", "c") == {key: [] for key in "jabc"}


def test_prepare_of_joined_group_changes_nothing(make_replica, reactions, effects):
    before = make_replica(2, ring=["a", "b"], prepared={"a": "k"})
    t = apply_entry(before, prepare("b", 3))
    assert t.new == before.evolve(version=3)
    assert t.diff is None
    assert reactions(t, "a", "b", "k") == dict.fromkeys("abk", ())
    assert effects(t, "a", "b", "k") == {key: [] for key in "abk"}


def test_prepare_of_left_group_is_ignored(make_replica, reactions, effects):
    before = make_replica(2, ring=["a", "b"], left=["j"])
    t = apply_entry(before, prepare("j", 3))
    assert t.new == before.evolve(version=3)
    assert t.diff is None
    assert reactions(t, "j", "a", "b") == dict.fromkeys("jab", ())
    assert effects(t, "j", "a", "b") == {key: [] for key in "jab"}


def test_prepare_of_left_group_on_empty_cluster_does_not_join(make_replica, reactions):
    before = make_replica(2, left=["j"])
    t = apply_entry(before, prepare("j", 3))
    assert t.new == before.evolve(version=3)
    assert reactions(t, "j") == {"j": ()}


# notify-join-cluster


def test_notify_moves_prepared_join_to_accepted(make_replica, reactions, effects):
    before = make_replica(6, ring=["a", "b", "c"], prepared={"a": "j"})
    t = apply_entry(before, notify("j", "a", 7))
    assert t.new == make_replica(7, ring=["a", "b", "c"], accepted={"a": "j"})
    assert t.diff == {"joiner": "j", "watcher": "a", "target": "b"}
    assert reactions(t, "j", "a", "b", "c") == {
        "j": (ACCEPT_JOIN.entry(joiner="j", watcher="a"),),
        "a": (),
        "b": (),
        "c": (),
    }
    assert effects(t, "j", "a", "b", "c") == {key: [] for key in "jabc"}


def test_notify_by_lone_group_targets_the_watcher_itself(make_replica, reactions):
    before = make_replica(1, ring=["a"], prepared={"a": "j"})
    t = apply_entry(before, notify("j", "a", 2))
    assert t.new == make_replica(2, ring=["a"], accepted={"a": "j"})
    assert t.diff == {"joiner": "j", "watcher": "a", "target": "a"}
    assert reactions(t, "j", "a") == {"j": (ACCEPT_JOIN.entry(joiner="j", watcher="a"),), "a": ()}


STALE_NOTIFIES = {
    "no-prepare": {},
    "prepared-by-other-watcher": {"prepared": {"b": "j"}},
    "accepted-by-other-watcher": {"accepted": {"b": "j"}},
    "repeated-after-accepted": {"accepted": {"a": "j"}},
}


@pytest.mark.parametrize("joins", STALE_NOTIFIES.values(), ids=STALE_NOTIFIES)
def test_stale_notify_changes_nothing_and_nobody_reacts(make_replica, reactions, effects, joins):
    """Whatever cancelled the attempt this notify belongs to already sent the one abort that
    restarts the joiner, so the notify must not send another."""
    before = make_replica(6, ring=["a", "b", "c"], **joins)
    t = apply_entry(before, notify("j", "a", 7))
    assert t.new == before.evolve(version=7)
    assert t.diff is None
    assert reactions(t, "j", "a", "b") == dict.fromkeys("jab", ())
    assert effects(t, "j", "a", "b") == {key: [] for key in "jab"}


def test_notify_for_joined_joiner_gets_no_reaction(make_replica, reactions):
    before = make_replica(6, ring=["a", "j"], prepared={"a": "k"})
    t = apply_entry(before, notify("j", "a", 7))
    assert t.new == before.evolve(version=7)
    assert reactions(t, "j", "a") == {"j": (), "a": ()}


# accept-join-cluster


def test_accept_stitches_joiner_into_the_ring(make_replica, reactions, effects):
    before = make_replica(8, ring=["a", "b", "c"], accepted={"a": "j"}, aborted=["j"])
    t = apply_entry(before, accept("j", "a", 9))
    assert t.new == make_replica(9, ring=["a", "j", "b", "c"])
    assert t.new.pairs == {"a": "j", "j": "b", "b": "c", "c": "a"}
    assert ring_cycle(t.new) == ["a", "j", "b", "c"]
    assert invariant_violations(t.new) == []
    assert t.diff == {"joiner": "j", "watcher": "a", "target": "b"}
    assert reactions(t, "j", "a", "b", "c") == dict.fromkeys("jabc", ())
    assert effects(t, "j", "a", "b", "c") == {key: [] for key in "jabc"}


def test_accept_by_lone_group_makes_a_two_cycle(make_replica, reactions, effects):
    before = make_replica(2, ring=["a"], accepted={"a": "j"})
    t = apply_entry(before, accept("j", "a", 3))
    assert t.new == make_replica(3, ring=["a", "j"])
    assert t.new.pairs == {"a": "j", "j": "a"}
    assert ring_cycle(t.new) == ["a", "j"]
    assert t.diff == {"joiner": "j", "watcher": "a", "target": "a"}
    assert reactions(t, "j", "a") == {"j": (), "a": ()}
    assert effects(t, "j", "a") == {"j": [], "a": []}


def test_accept_keeps_other_joins_in_flight(make_replica):
    before = make_replica(8, ring=["a", "b", "c"], accepted={"a": "j", "c": "k"})
    t = apply_entry(before, accept("j", "a", 9))
    assert t.new == make_replica(9, ring=["a", "j", "b", "c"], accepted={"c": "k"})


NOT_ACCEPTED = {
    "nothing": {},
    "only-prepared": {"prepared": {"a": "j"}},
    "accepted-by-other-watcher": {"accepted": {"b": "j"}},
}


@pytest.mark.parametrize("joins", NOT_ACCEPTED.values(), ids=NOT_ACCEPTED)
def test_accept_when_not_accepted_changes_nothing_and_nobody_reacts(
    make_replica, reactions, effects, joins
):
    before = make_replica(8, ring=["a", "b", "c"], **joins)
    t = apply_entry(before, accept("j", "a", 9))
    assert t.new == before.evolve(version=9)
    assert t.diff is None
    assert reactions(t, "j", "a", "b") == dict.fromkeys("jab", ())
    assert effects(t, "j", "a", "b") == {key: [] for key in "jab"}


def test_accept_of_joined_joiner_gets_no_reaction(make_replica, reactions):
    before = make_replica(8, ring=["a", "j"], accepted={"a": "k"})
    t = apply_entry(before, accept("j", "a", 9))
    assert t.new == before.evolve(version=9)
    assert reactions(t, "j", "a", "k") == dict.fromkeys("jak", ())


# abort-join-cluster


def test_abort_removes_prepared_join_of_that_group_only(make_replica, reactions, effects):
    before = make_replica(3, ring=["a", "b", "c"], prepared={"a": "j"}, accepted={"c": "k"})
    t = apply_entry(before, abort("j", 4))
    assert t.new == make_replica(4, ring=["a", "b", "c"], accepted={"c": "k"}, aborted=["j"])
    assert t.diff == {"aborted": "j"}
    assert reactions(t, "j", "k", "a", "c") == {
        "j": (PREPARE_JOIN.entry(joiner="j"),),
        "k": (),
        "a": (),
        "c": (),
    }
    assert effects(t, "j", "k", "a", "c") == {"j": [("back_off",)], "k": [], "a": [], "c": []}


def test_abort_removes_accepted_join(make_replica, reactions, effects):
    before = make_replica(3, ring=["a", "b"], prepared={"b": "k"}, accepted={"a": "j"})
    t = apply_entry(before, abort("j", 4))
    assert t.new == make_replica(4, ring=["a", "b"], prepared={"b": "k"}, aborted=["j"])
    assert t.diff == {"aborted": "j"}
    assert reactions(t, "j", "k", "a") == {"j": (PREPARE_JOIN.entry(joiner="j"),), "k": (), "a": ()}
    assert effects(t, "j", "k", "a") == {"j": [("back_off",)], "k": [], "a": []}


def test_abort_of_group_with_no_join_in_flight_records_it(make_replica, reactions, effects):
    before = make_replica(3, ring=["a"])
    t = apply_entry(before, abort("j", 4))
    assert t.new == make_replica(4, ring=["a"], aborted=["j"])
    assert t.diff == {"aborted": "j"}
    assert reactions(t, "j", "a") == {"j": (PREPARE_JOIN.entry(joiner="j"),), "a": ()}
    assert effects(t, "j", "a") == {"j": [("back_off",)], "a": []}


def test_abort_of_joined_group_is_a_no_op(make_replica, reactions, effects):
    before = make_replica(3, ring=["a", "j"], prepared={"j": "k"})
    t = apply_entry(before, abort("j", 4))
    assert t.new == before.evolve(version=4)
    assert t.diff is None
    assert reactions(t, "j", "a", "k") == dict.fromkeys("jak", ())
    assert effects(t, "j", "a", "k") == {key: [] for key in "jak"}


def test_abort_of_left_group_changes_nothing(make_replica, reactions, effects):
    before = make_replica(3, ring=["a"], left=["j"])
    t = apply_entry(before, abort("j", 4))
    assert t.new == before.evolve(version=4)
    assert t.diff is None
    assert reactions(t, "j", "a") == {"j": (), "a": ()}
    assert effects(t, "j", "a") == {"j": [], "a": []}


# the protocol across entries


def play(replica, entries, actor):
    """Apply ``entries`` at consecutive positions after ``replica``; the final replica and
    everything ``actor`` appended along the way."""
    appended = []
    for position, entry in enumerate(entries, start=replica.version + 1):
        t = apply_entry(replica, entry.at(position))
        replica, appended = t.new, [*appended, *t.reactions(actor)]
    return replica, appended


def test_one_retry_when_the_watcher_leaves_after_notifying(make_replica):
    """The watcher's notify reaches the log after its own departure: the joiner is told to
    abort once (by the leave), and re-prepares once."""
    before = make_replica(6, ring=["a", "w", "b"], prepared={"w": "j"})
    entries = [GROUP_LEAVE.entry(id="w"), NOTIFY_JOIN.entry(joiner="j", watcher="w")]
    after_leave, appended = play(before, entries, "j")
    assert after_leave == make_replica(8, ring=["a", "b"], aborted=["j"], left=["w"])
    assert appended == [ABORT_JOIN.entry(id="j")]
    after_abort, appended = play(after_leave, appended, "j")
    assert after_abort == make_replica(9, ring=["a", "b"], aborted=["j"], left=["w"])
    assert appended == [PREPARE_JOIN.entry(joiner="j")]


def test_full_join_from_lone_group(make_replica):
    """prepare, then the watcher's notify, then the joiner's accept: a ring of two."""
    replica = make_replica(0, ring=["a"])
    t1 = apply_entry(replica, prepare("j", 1))
    (notify_entry,) = t1.reactions("a")
    t2 = apply_entry(t1.new, notify_entry.at(2))
    (accept_entry,) = t2.reactions("j")
    t3 = apply_entry(t2.new, accept_entry.at(3))
    assert t3.new == make_replica(3, ring=["a", "j"])
    assert [t.reactions(g) for t in (t1, t2, t3) for g in "aj"] == [
        (notify_entry,),
        (),
        (),
        (accept_entry,),
        (),
        (),
    ]
