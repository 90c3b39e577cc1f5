"""gc and set-replica."""

from __future__ import annotations

import json
import logging

from pyrsistent import pmap

from peer.log.apply import apply_entry
from peer.log.entries.gc import GC, SET_REPLICA, set_replica
from peer.log.entries.jobs import SUBMIT_JOB
from peer.log.entry import Entry
from tests.unit.job.wordcount import document


def wordcount_doc() -> dict:
    return {k: v for k, v in document().items() if k != "id"}


def test_gc_keeps_the_replica_and_only_its_caller_stores_the_origin(
    make_replica, reactions, effects
):
    before = make_replica(
        11, ring=["a", "b"], prepared={"a": "j"}, left=["x"], group_peers={"a": ["a1"]}
    )
    t = apply_entry(before, GC.entry(id="b").at(12))
    assert t.new == before.evolve(version=12)
    assert t.diff == {"caller": "b"}
    assert reactions(t, "a", "b", "j") == dict.fromkeys("abj", ())
    assert effects(t, "a", "b", "j") == {"a": [], "b": [("store_origin", t.new)], "j": []}
    assert effects(t, "b")["b"][0][1].version == 12


def test_gc_drops_what_finished_jobs_left_but_their_outcome_and_hash(make_replica):
    """A running job keeps everything; a finished one only what a later submit-job under its
    id needs: its outcome (so the submit stays a no-op) and its hash."""
    running, done = "r", "d"
    before = make_replica(3, ring=["a"]).evolve(
        finished=pmap({done: "killed"}),
        reasons=pmap({done: "an operator killed it"}),
        names=pmap({done: "nightly", running: "hourly"}),
        submitted=pmap({done: 1.0, running: 2.0}),
        hashes=pmap({done: "ab" * 32, running: "cd" * 32}),
        rollbacks=pmap({done: "epochs stopped", running: "a log was dropped"}),
    )
    after = apply_entry(before, GC.entry(id="client").at(4)).new
    assert after == before.evolve(
        version=4,
        reasons=pmap(),
        names=pmap({running: "hourly"}),
        submitted=pmap({running: 2.0}),
        rollbacks=pmap({running: "a log was dropped"}),
    )
    resubmitted = apply_entry(after, SUBMIT_JOB.entry(id=done, job=wordcount_doc()).at(5)).new
    assert resubmitted == after.evolve(version=5)


def test_gc_by_a_client_that_is_no_group(make_replica, effects):
    t = apply_entry(make_replica(0, ring=["a"]), GC.entry(id="client-7").at(1))
    assert effects(t, "a", "client-7") == {
        "a": [],
        "client-7": [("store_origin", make_replica(1, ring=["a"]))],
    }


def test_set_replica_entry_is_positioned_at_the_origin(make_replica):
    origin = make_replica(40, ring=["a", "b"])
    entry = set_replica(origin)
    assert entry == Entry("set-replica", {"replica": origin}, 40)
    assert entry.fn == SET_REPLICA.name


def test_set_replica_replaces_the_whole_replica(make_replica, reactions, effects):
    before = make_replica(3, ring=["x", "y"], prepared={"x": "j"}, group_peers={"x": ["x1"]})
    origin = make_replica(40, ring=["a", "b"], left=["x"], group_peers={"a": ["a1"]})
    t = apply_entry(before, set_replica(origin))
    assert t.new == origin
    assert t.old == before
    assert t.diff is None
    assert t.kind is SET_REPLICA
    assert reactions(t, "a", "x", "j") == dict.fromkeys("axj", ())
    assert effects(t, "a", "x", "j") == {key: [] for key in "axj"}


def test_set_replica_takes_the_entry_position_as_version(make_replica):
    origin = make_replica(40, ring=["a"])
    t = apply_entry(make_replica(), Entry("set-replica", {"replica": origin}).at(45))
    assert t.new == make_replica(45, ring=["a"])


def test_set_replica_read_from_the_log_is_refused(make_replica, reactions, effects, caplog):
    caplog.set_level(logging.WARNING, logger="peer.log.apply")
    before = make_replica(7, ring=["x"])
    origin = make_replica(40, ring=["a", "b"])
    data = json.dumps({"fn": "set-replica", "args": {"replica": origin.to_json()}}).encode()
    entry = Entry.decode(data, 8)
    assert entry == Entry("set-replica", {"replica": origin.to_json()}, 8)
    t = apply_entry(before, entry)
    assert t.new == make_replica(8, ring=["x"])
    assert t.kind is None
    assert t.diff is None
    assert reactions(t, "a", "x") == {"a": (), "x": ()}
    assert effects(t, "a", "x") == {"a": [], "x": []}
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    assert record.getMessage().startswith("log entry 8 ignored ('set-replica', ")
    assert "set-replica: argument 'replica' must be a non-empty Replica" in record.getMessage()
