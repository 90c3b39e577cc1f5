"""submit-job, kill-job and complete-job, and the allocation the log recomputes after them and
after every membership change."""

from __future__ import annotations

import json
import logging

import pytest

from peer.log.apply import apply_entry
from peer.log.entries.group_leave import GROUP_LEAVE
from peer.log.entries.jobs import COMPLETE_JOB, KILL_JOB, MAX_REASON_CHARS, SUBMIT_JOB, kill_job
from peer.log.entries.virtual_peers import ADD_VIRTUAL_PEER, LEAVE_CLUSTER
from peer.log.replica import Replica


def job(flux: str = "kill", out_peers: int = 1, **extra) -> dict:
    """Paths name nothing importable on purpose: the log checks shape, never imports."""
    catalog = [
        {"name": "in", "kind": "input", "plugin": "nowhere.plugins:input", "n_peers": 1},
        {"name": "f", "kind": "function", "fn": "nowhere.fns:f"},
        {"name": "out", "kind": "output", "plugin": "nowhere:out", "n_peers": out_peers},
    ]
    return {
        "workflow": [["in", "f"], ["f", "out"]],
        "catalog": [{**task, "flux_policy": flux} for task in catalog],
        **extra,
    }


def play(replica: Replica, *entries) -> Replica:
    for entry in entries:
        replica = apply_entry(replica, entry.at(replica.version + 1)).new
    return replica


def cluster(make_replica, **peers: list[str]) -> Replica:
    """Joined groups with their virtual peers, announced through the log so they get short ids."""
    base = make_replica(0, ring=sorted(peers))
    return play(
        base, *(ADD_VIRTUAL_PEER.entry(id=p, group=g) for g, ps in peers.items() for p in ps)
    )


def test_submit_allocates_every_task_and_stamps_the_version(make_replica):
    before = cluster(make_replica, a=["a1", "a2"], b=["b1"])
    after = play(before, SUBMIT_JOB.entry(id="j", job=job()))
    assert dict(after.allocations["j"]) == {"in": ("a1",), "f": ("a2",), "out": ("b1",)}
    assert after.allocation_versions["j"] == after.version
    assert list(after.job_order) == ["j"]
    assert "j" in after.started
    assert after.short_ids["j"] not in {after.short_ids[p] for p in ("a1", "a2", "b1")}


def test_resubmitting_an_id_is_a_no_op(make_replica):
    once = play(cluster(make_replica, a=["a1", "a2", "a3"]), SUBMIT_JOB.entry(id="j", job=job()))
    t = apply_entry(once, SUBMIT_JOB.entry(id="j", job=job(out_peers=2)).at(once.version + 1))
    assert t.new == once.evolve(version=once.version + 1)
    assert t.diff is None


def test_a_job_of_the_wrong_shape_is_refused_with_its_position(make_replica, caplog):
    caplog.set_level(logging.WARNING, logger="peer.log.apply")
    before = cluster(make_replica, a=["a1"])
    bad = job()
    bad["workflow"].append(["out", "in"])
    entry = SUBMIT_JOB.entry(id="j", job=bad)
    t = apply_entry(before, entry.at(9))
    assert t.new == before.evolve(version=9)
    assert caplog.messages == [
        f"log entry 9 ignored ('submit-job', {len(entry.encode())} bytes): submit-job 'j' "
        "refused: job 'j': task 'in': workflow: an input task cannot have incoming edges, got "
        "'out' -> 'in'"
    ]


def test_a_job_too_big_for_the_cluster_waits_with_no_peers(make_replica):
    after = play(cluster(make_replica, a=["a1", "a2"]), SUBMIT_JOB.entry(id="j", job=job()))
    assert dict(after.allocations["j"]) == {"in": (), "f": (), "out": ()}
    assert "j" not in after.started
    grown = play(after, ADD_VIRTUAL_PEER.entry(id="a3", group="a"))
    assert dict(grown.allocations["j"]) == {"in": ("a1",), "f": ("a2",), "out": ("a3",)}
    assert grown.allocation_versions["j"] == grown.version


def test_kill_frees_the_peers_and_remembers_the_outcome(make_replica):
    running = play(cluster(make_replica, a=["a1", "a2", "a3"]), SUBMIT_JOB.entry(id="j", job=job()))
    killed = play(running, KILL_JOB.entry(id="j"))
    assert "j" not in killed.jobs
    assert "j" not in killed.allocations
    assert dict(killed.finished) == {"j": "killed"}
    assert play(killed, SUBMIT_JOB.entry(id="j", job=job())) == killed.evolve(
        version=killed.version + 1
    )


def test_the_job_completes_when_every_output_peer_of_the_allocation_is_done(make_replica):
    running = play(
        cluster(make_replica, a=["a1", "a2", "a3", "a4"]),
        SUBMIT_JOB.entry(id="j", job=job(out_peers=2)),
    )
    outs, version = running.allocations["j"]["out"], running.allocation_versions["j"]
    assert len(outs) == 2
    stale = play(running, COMPLETE_JOB.entry(id="j", peer=outs[0], version=version - 1))
    assert "j" not in stale.done
    not_output = play(
        running, COMPLETE_JOB.entry(id="j", peer=running.allocations["j"]["f"][0], version=version)
    )
    assert "j" not in not_output.done
    half = play(running, COMPLETE_JOB.entry(id="j", peer=outs[0], version=version))
    assert set(half.done["j"]) == {outs[0]}
    assert "j" in half.jobs
    whole = play(half, COMPLETE_JOB.entry(id="j", peer=outs[1], version=version))
    assert dict(whole.finished) == {"j": "completed"}
    assert not whole.allocations


def test_a_departure_reallocates_and_forgets_what_was_done(make_replica):
    running = play(
        cluster(make_replica, a=["a1", "a2"], b=["b1", "b2", "b3"]),
        SUBMIT_JOB.entry(id="j", job=job(out_peers=2)),
    )
    out = running.allocations["j"]["out"][0]
    half = play(
        running, COMPLETE_JOB.entry(id="j", peer=out, version=running.allocation_versions["j"])
    )
    reader = running.allocations["j"]["in"][0]
    moved = play(half, LEAVE_CLUSTER.entry(id=reader, group=running.group_of(reader)))
    assert moved.allocation_versions["j"] == moved.version
    assert "j" not in moved.done
    assert sum(len(ps) for ps in moved.allocations["j"].values()) == 4


@pytest.mark.parametrize(("flux", "outcome"), [("kill", "killed"), ("recover", None)])
def test_a_started_job_left_without_peers_follows_its_flux_policy(make_replica, flux, outcome):
    running = play(
        cluster(make_replica, a=["a1", "a2"], b=["b1"]), SUBMIT_JOB.entry(id="j", job=job(flux))
    )
    after = play(running, GROUP_LEAVE.entry(id="b"))
    assert after.finished.get("j") == outcome
    if outcome is None:
        assert dict(after.allocations["j"]) == {"in": (), "f": (), "out": ()}


def test_continue_lets_a_started_task_go_on_below_its_minimum(make_replica):
    doc = job("continue")
    doc["catalog"][1]["min_peers"] = 2
    running = play(
        cluster(make_replica, a=["a1", "a2"], b=["b1", "b2"]), SUBMIT_JOB.entry(id="j", job=doc)
    )
    assert len(running.allocations["j"]["f"]) == 2
    worker = running.allocations["j"]["f"][0]
    after = play(running, LEAVE_CLUSTER.entry(id=worker, group=running.group_of(worker)))
    assert len(after.allocations["j"]["f"]) == 1
    assert "j" in after.jobs


def test_an_entry_that_concerns_no_job_keeps_every_version(make_replica):
    running = play(cluster(make_replica, a=["a1", "a2", "a3"]), SUBMIT_JOB.entry(id="j", job=job()))
    t = apply_entry(running, SUBMIT_JOB.entry(id="k", job=job()).at(running.version + 1))
    assert t.new.allocation_versions["j"] == running.allocation_versions["j"]
    assert t.new.allocations["j"] == running.allocations["j"]


def test_a_replica_with_jobs_round_trips_through_json(make_replica):
    running = play(
        cluster(make_replica, a=["a1", "a2", "a3"]),
        SUBMIT_JOB.entry(id="j", job=job()),
        SUBMIT_JOB.entry(id="k", job=job()),
        KILL_JOB.entry(id="k"),
    )
    assert Replica.from_json(json.loads(json.dumps(running.to_json()))) == running


def test_a_group_leaving_drops_its_site_tags_and_short_ids(make_replica):
    base = make_replica(0, ring=["a", "b"])
    added = play(base, ADD_VIRTUAL_PEER.entry(id="b1", group="b", site="h:1", tags=["gpu"]))
    assert added.sites["b"] == "h:1"
    assert added.group_tags["b"] == ("gpu",)
    gone = play(added, GROUP_LEAVE.entry(id="b"))
    assert "b" not in gone.sites
    assert "b" not in gone.group_tags
    assert "b1" not in gone.short_ids


def test_tags_must_be_strings(make_replica):
    before = make_replica(0, ring=["a"])
    t = apply_entry(before, ADD_VIRTUAL_PEER.entry(id="a1", group="a", tags=[3]).at(1))
    assert t.new == before.evolve(version=1)


HASH = "ab" * 32


def test_the_hash_and_name_are_kept_while_running_and_after_the_job_ends(make_replica):
    named = job(name="word count", metadata={"team": "search"})
    running = play(
        cluster(make_replica, a=["a1", "a2", "a3"]), SUBMIT_JOB.entry(id="j", job=named, hash=HASH)
    )
    assert (running.hashes["j"], running.names["j"]) == (HASH, "word count")
    assert running.jobs["j"].metadata == {"team": "search"}
    killed = play(running, KILL_JOB.entry(id="j"))
    assert (killed.hashes["j"], killed.names["j"]) == (HASH, "word count")
    assert "j" not in killed.reasons


def test_a_job_without_hash_or_name_leaves_no_trace_of_either(make_replica):
    running = play(cluster(make_replica, a=["a1"]), SUBMIT_JOB.entry(id="j", job=job()))
    assert "j" in running.jobs
    assert (dict(running.hashes), dict(running.names)) == ({}, {})


@pytest.mark.parametrize("digest", ["", "AB" * 32, "ab" * 31, "zz" * 32, 5])
def test_a_submission_with_a_malformed_hash_is_refused(make_replica, digest):
    before = cluster(make_replica, a=["a1"])
    after = play(before, SUBMIT_JOB.entry(id="j", job=job(), hash=digest))
    assert after == before.evolve(version=before.version + 1)


def test_a_kill_keeps_its_reason_cut_to_the_bound(make_replica):
    running = play(cluster(make_replica, a=["a1", "a2", "a3"]), SUBMIT_JOB.entry(id="j", job=job()))
    killed = play(running, KILL_JOB.entry(id="j", reason="fn raised\n" + "x" * 5000))
    assert killed.finished["j"] == "killed"
    assert len(killed.reasons["j"]) == MAX_REASON_CHARS
    assert killed.reasons["j"].startswith("fn raised\nxxx")
    assert killed.reasons["j"].endswith("…")


def test_kill_job_cuts_the_reason_it_carries():
    assert kill_job("j", "y" * 5000).args["reason"] == "y" * (MAX_REASON_CHARS - 1) + "…"
    assert kill_job("j", "short").args == {"id": "j", "reason": "short"}
    assert kill_job("j").args == {"id": "j"}


def test_a_kill_whose_reason_is_not_a_string_is_refused(make_replica):
    running = play(cluster(make_replica, a=["a1", "a2", "a3"]), SUBMIT_JOB.entry(id="j", job=job()))
    after = play(running, KILL_JOB.entry(id="j", reason=["no"]))
    assert after == running.evolve(version=running.version + 1)


def test_a_flux_kill_says_which_task_killed_the_job(make_replica):
    running = play(
        cluster(make_replica, a=["a1", "a2"], b=["b1"]), SUBMIT_JOB.entry(id="j", job=job("kill"))
    )
    after = play(running, GROUP_LEAVE.entry(id="b"))
    assert after.reasons["j"] == "left without peers, and task 'f' has flux_policy kill"


def test_every_new_job_field_round_trips_through_json(make_replica):
    running = play(
        cluster(make_replica, a=["a1", "a2", "a3"]),
        SUBMIT_JOB.entry(id="j", job=job(name="n", metadata={"a": [1, {"b": None}]}), hash=HASH),
        SUBMIT_JOB.entry(id="k", job=job(name="m"), hash="cd" * 32),
        KILL_JOB.entry(id="k", reason="because"),
    )
    doc = json.loads(json.dumps(running.to_json()))
    assert (doc["reasons"], doc["names"]) == ({"k": "because"}, {"j": "n", "k": "m"})
    assert doc["hashes"] == {"j": HASH, "k": "cd" * 32}
    assert doc["jobs"]["j"]["metadata"] == {"a": [1, {"b": None}]}
    assert Replica.from_json(doc) == running
