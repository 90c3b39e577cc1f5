"""Applying with allocations landing later reaches what the sequential apply reaches: over
random logs and random moments at which owed allocations land (or fail to be computed), the
same transitions come out in the same order, with the same reactions and side effects, and
the complete replica at every position equals apply_entry's, key versions included."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from peer.log.apply import apply_entry
from peer.log.entries.jobs import COMPLETE_JOB, SUBMIT_JOB
from peer.log.entries.join import ABORT_JOIN, NOTIFY_JOIN, PREPARE_JOIN
from peer.log.entries.virtual_peers import ADD_VIRTUAL_PEER
from peer.log.entry import Entry, Transition
from peer.log.pipeline import Pipeline, Progress
from peer.log.replica import KEYS, Replica
from tests.unit.log.local_recovery import local_recovery_logs
from tests.unit.log.random_logs import random_logs
from tests.unit.log.test_allocation_properties import GROUPS


class Calls:
    """An Effects that records every call, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def __getattr__(self, name: str):
        return lambda *args: self.calls.append((name, *args))


def acts(t: Transition) -> list:
    actors = sorted({*GROUPS, *(v for v in t.entry.args.values() if isinstance(v, str))})
    out = []
    for actor in actors:
        calls = Calls()
        t.side_effects(actor, calls)
        out.append((actor, t.reactions(actor), calls.calls))
    return out


def read(replica: Replica, t: Transition) -> dict[str, Any]:
    return {k: getattr(replica, k) for k in sorted(t.kind.reads if t.kind else KEYS)}


def same_transition(got: Transition, want: Transition) -> None:
    assert got.entry == want.entry
    assert got.kind is want.kind
    assert got.diff == want.diff
    assert got.new.version == want.new.version
    assert read(got.old, want) == read(want.old, want)
    own = want.kind.apply(want.old, want.entry) if want.kind else want.new
    assert read(got.new, want) == read(own, want), "the entry's own change, without allocation"
    assert acts(got) == acts(want)


def same_replica(got: Replica, want: Replica) -> None:
    assert got == want
    assert got.version == want.version
    assert got.key_versions == want.key_versions


def land(machine: Pipeline, fail: bool) -> tuple[Pipeline, Progress]:
    pending = machine.ready()
    result = RuntimeError("the scheduler went away") if fail else pending.compute()
    return machine.land(pending.position, result)


@settings(max_examples=150, deadline=None)
@given(random_logs(), st.data())
def test_every_member_reaches_the_sequential_replica_at_every_position(log, data):
    reaches_the_sequential_replica(Replica(), log, data)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(local_recovery_logs(), st.data())
def test_takeovers_and_recoveries_reach_the_sequential_replica(case, data):
    start, log = case
    reaches_the_sequential_replica(start, log, data)


def reaches_the_sequential_replica(start: Replica, log: list[Entry], data: st.DataObject) -> None:
    classic, replica = [], start
    for entry in log:
        classic.append(apply_entry(replica, entry))
        replica = classic[-1].new
    machine, out = Pipeline.start(start), Progress()
    for entry in log:
        while not machine.idle and data.draw(st.booleans()):
            machine, more = land(machine, data.draw(st.integers(0, 9)) == 0)
            out = out.then(more)
        machine, more = machine.offer(entry)
        out = out.then(more)
    while not machine.idle:
        machine, more = land(machine, fail=False)
        out = out.then(more)
    assert not machine.unapplied
    assert len(out.transitions) == len(log)
    for got, want in zip(out.transitions, classic, strict=True):
        same_transition(got, want)
    assert len(out.settled) == len(log)
    for got, want in zip(out.settled, classic, strict=True):
        same_replica(got, want.new)
    same_replica(machine.current, replica)


JOB = {
    "workflow": [["in", "out"]],
    "catalog": [
        {"name": "in", "kind": "input", "plugin": "nowhere:x", "min_peers": 1},
        {"name": "out", "kind": "output", "plugin": "nowhere:x", "min_peers": 1},
    ],
    "barrier_period": None,
}


def offered(machine: Pipeline, *entries: Entry) -> tuple[Pipeline, Progress]:
    out = Progress()
    for entry in entries:
        machine, more = machine.offer(entry)
        out = out.then(more)
    return machine, out


def owing() -> Pipeline:
    """g0 joined with two peers, then a job submitted: its allocation is owed at position 3."""
    machine, _ = offered(
        Pipeline.start(Replica()),
        PREPARE_JOIN.entry(joiner="g0").at(0),
        ADD_VIRTUAL_PEER.entry(id="p1", group="g0").at(1),
        ADD_VIRTUAL_PEER.entry(id="p2", group="g0").at(2),
        SUBMIT_JOB.entry(id="j", job=JOB).at(3),
    )
    assert machine.ready().position == 3
    return machine


def test_entries_that_read_no_lagging_key_apply_while_the_allocation_is_owed():
    machine, out = offered(owing(), NOTIFY_JOIN.entry(joiner="g1", watcher="g0").at(4))
    assert [t.entry.position for t in out.transitions] == [4]
    assert out.settled == ()
    assert "allocations" in machine.lagging()


def test_an_entry_reading_a_lagging_key_waits_and_so_does_everything_after_it():
    machine = owing()
    complete = COMPLETE_JOB.entry(id="j", peer="p1", version=3).at(4)
    machine, out = offered(machine, complete, ABORT_JOIN.entry(id="g1").at(5))
    assert out == Progress()
    assert machine.unapplied == (complete, ABORT_JOIN.entry(id="g1").at(5))
    pending = machine.ready()
    machine, out = machine.land(pending.position, pending.compute())
    assert [t.entry.position for t in out.transitions] == [4, 5]
    assert [r.version for r in out.settled] == [3, 4, 5]
    assert machine.idle
    assert machine.current.key_version("allocations") == 3


def test_a_second_allocation_queues_behind_the_first():
    machine, out = offered(owing(), ADD_VIRTUAL_PEER.entry(id="p3", group="g0").at(4))
    assert [t.entry.position for t in out.transitions] == [4]
    assert [r.version for r in machine.owed] == [3, 4]
    assert machine.ready().position == 3
    pending = machine.ready()
    machine, out = machine.land(3, pending.compute())
    assert [r.version for r in out.settled] == [3]
    assert machine.ready().position == 4


def test_an_allocation_for_a_position_not_owed_is_refused():
    with pytest.raises(ValueError, match="allocation landed for position 7, owed: 3"):
        owing().land(7, Replica())
