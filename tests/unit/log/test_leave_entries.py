"""member-leave and member-exit: a graceful leave keeps the member's work until it exits, and
its removal by group-leave-cluster ends it instead of restarting it."""

from __future__ import annotations

from peer.log.apply import apply_entry
from peer.log.entries.group_leave import GROUP_LEAVE
from peer.log.entries.jobs import SUBMIT_JOB
from peer.log.entries.leave import EXIT, LEAVE
from peer.log.entries.virtual_peers import ADD_VIRTUAL_PEER
from peer.log.replica import invariant_violations


def test_leave_marks_a_joined_member_leaving_and_asks_it_alone_to_hand_over(make_replica, effects):
    t = apply_entry(make_replica(3, ring=["a", "b"]), LEAVE.entry(id="a").at(4))
    assert t.new.leaving == {"a"}
    assert t.new.groups == {"a", "b"}
    assert t.diff == {"member": "a"}
    assert effects(t, "a", "b") == {"a": [("hand_over",)], "b": []}
    assert invariant_violations(t.new) == []


def test_leave_of_a_member_not_joined_or_leaving_already_changes_nothing(make_replica, effects):
    leaving = apply_entry(make_replica(3, ring=["a", "b"]), LEAVE.entry(id="a").at(4)).new
    for replica, member in [(leaving, "a"), (leaving, "zz"), (make_replica(1, left=["c"]), "c")]:
        t = apply_entry(replica, LEAVE.entry(id=member).at(replica.version + 1))
        assert t.diff is None
        assert t.new == replica.evolve(version=replica.version + 1)
        assert effects(t, member) == {member: []}


def test_exit_moves_a_leaving_member_to_exiting_and_only_a_leaving_one(make_replica):
    ring = make_replica(3, ring=["a", "b"])
    assert apply_entry(ring, EXIT.entry(id="a").at(4)).diff is None
    leaving = apply_entry(ring, LEAVE.entry(id="a").at(4)).new
    t = apply_entry(leaving, EXIT.entry(id="a").at(5))
    assert (t.new.leaving, t.new.exiting) == (set(), {"a"})
    assert t.diff == {"member": "a"}


def test_an_exiting_member_hands_its_work_to_the_others(make_replica):
    replica = make_replica(1, ring=["a", "b"])
    for position, (peer, group) in enumerate([("a1", "a"), ("b1", "b")], start=2):
        replica = apply_entry(
            replica, ADD_VIRTUAL_PEER.entry(id=peer, group=group).at(position)
        ).new
    job = {"workflow": [["in", "out"]], "barrier_period": None, "catalog": [
        {"name": "in", "kind": "input", "plugin": "nowhere:input", "n_peers": 1},
        {"name": "out", "kind": "output", "plugin": "nowhere:out", "n_peers": 1},
    ]}  # fmt: skip
    replica = apply_entry(replica, SUBMIT_JOB.entry(id="j", job=job).at(4)).new
    assert sorted(p for ps in replica.allocations["j"].values() for p in ps) == ["a1", "b1"]
    replica = apply_entry(replica, LEAVE.entry(id="a").at(5)).new
    assert replica.allocation_versions["j"] == 4, "a leaving member keeps its work"
    replica = apply_entry(replica, EXIT.entry(id="a").at(6)).new
    held = [p for ps in replica.allocations["j"].values() for p in ps]
    assert "a1" not in held
    assert replica.allocation_versions["j"] == 6


def test_removing_an_exiting_member_ends_it_and_downing_one_restarts_it(make_replica, effects):
    ring = make_replica(3, ring=["a", "b", "c"])
    exiting = apply_entry(
        apply_entry(ring, LEAVE.entry(id="a").at(4)).new, EXIT.entry(id="a").at(5)
    ).new
    removed = apply_entry(exiting, GROUP_LEAVE.entry(id="a").at(6))
    assert removed.new.removed == {"a"}
    assert "a" in removed.new.left
    assert removed.new.exiting == set()
    assert removed.diff["exited"] is True
    assert effects(removed, "a", "b") == {"a": [("end_group",)], "b": []}
    leaving = apply_entry(ring, LEAVE.entry(id="b").at(4)).new
    downed = apply_entry(leaving, GROUP_LEAVE.entry(id="b").at(5))
    assert downed.new.removed == set()
    assert downed.new.leaving == set()
    assert effects(downed, "b") == {"b": [("restart_group",)]}
    assert invariant_violations(removed.new) == invariant_violations(downed.new) == []
