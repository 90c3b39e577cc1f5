"""task-recovered: a replacement that finished its replay leaves ``recovering``, under the
allocation version it names only; bad arguments are refused like any entry's."""

from __future__ import annotations

import pytest

from peer import api
from peer.log.apply import apply_entry, kind_of
from peer.log.entries.recovery import TASK_RECOVERED, task_recovered
from peer.log.entries.rollback import rollback_job
from peer.log.entry import Entry, InvalidEntry
from peer.log.replica import Replica
from tests.unit.log.local_recovery import JOB, cluster, down, job_doc, peer_of, singles, step


def recovering_cluster():
    before = cluster(job_doc(standby=True, causal_depth=2), singles(12))
    after = down(before, peer_of(before, "f"), peer_of(before, "h"))
    return after, peer_of(after, "f"), peer_of(after, "h")


def test_a_recovered_peer_leaves_recovering_and_keeps_its_seat():
    replica, f, h = recovering_cluster()
    version = replica.allocation_versions[JOB]
    once = step(replica, task_recovered(JOB, f, version))
    assert once.recovering[JOB] == {h}
    assert once.takeovers == replica.takeovers
    assert once.allocations is replica.allocations
    twice = step(once, task_recovered(JOB, h, version))
    assert JOB not in twice.recovering
    assert twice.allocation_versions[JOB] == version


@pytest.mark.parametrize(
    "change",
    [
        lambda job, peer, version: (job, peer, version - 1),
        lambda job, peer, version: (job, "nobody", version),
        lambda job, peer, version: ("other", peer, version),
    ],
)
def test_a_stale_or_unknown_entry_changes_nothing(change):
    replica, f, _ = recovering_cluster()
    job, peer, version = change(JOB, f, replica.allocation_versions[JOB])
    t = apply_entry(replica, task_recovered(job, peer, version).at(replica.version + 1))
    assert t.new.recovering is replica.recovering
    assert t.diff is None


def test_a_peer_already_recovered_changes_nothing():
    replica, f, _ = recovering_cluster()
    entry = task_recovered(JOB, f, replica.allocation_versions[JOB])
    once = step(replica, entry)
    assert step(once, entry).recovering is once.recovering


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"job": JOB, "peer": "p1"}, "argument 'version' must be a non-empty int, got None"),
        ({"job": "", "peer": "p1", "version": 3}, "argument 'job' must be a non-empty str"),
        ({"job": JOB, "peer": 5, "version": 3}, "argument 'peer' must be a non-empty str"),
        ({"job": JOB, "peer": "p1", "version": "3"}, "argument 'version' must be a non-empty int"),
        ({"job": JOB, "peer": "p1", "version": True}, "argument 'version' must be an int"),
    ],
)
def test_bad_arguments_are_refused(args, message):
    replica, _, _ = recovering_cluster()
    entry = Entry(TASK_RECOVERED.name, args)
    with pytest.raises(InvalidEntry, match=message):
        kind_of(entry).apply(replica, entry)
    assert apply_entry(replica, entry.at(replica.version + 1)).new.recovering is replica.recovering


def test_a_rollback_gives_the_job_a_new_version_with_the_same_peers():
    replica, _, _ = recovering_cluster()
    version = replica.allocation_versions[JOB]
    t = apply_entry(
        replica, rollback_job(JOB, version, "a log was dropped").at(replica.version + 1)
    )
    assert t.new.allocation_versions[JOB] == replica.version + 1
    assert t.new.allocations[JOB] == replica.allocations[JOB]
    assert JOB not in t.new.takeovers
    assert JOB not in t.new.recovering
    assert t.diff == {"job": JOB, "reason": "a log was dropped"}
    assert t.new.rollbacks[JOB] == "a log was dropped"
    assert api.status(t.new, JOB).rolled_back == "a log was dropped"
    assert Replica.from_json(t.new.to_json()).rollbacks == t.new.rollbacks


@pytest.mark.parametrize("change", [lambda v: v - 1, lambda v: v + 1])
def test_a_rollback_of_another_version_changes_nothing(change):
    replica, _, _ = recovering_cluster()
    stale = change(replica.allocation_versions[JOB])
    t = apply_entry(replica, rollback_job(JOB, stale, "late").at(replica.version + 1))
    assert t.new.allocation_versions is replica.allocation_versions
    assert t.diff is None


def test_a_rollback_reason_is_cut():
    entry = rollback_job(JOB, 3, "x" * 5000)
    assert len(entry.args["reason"]) <= 1000
    assert kind_of(entry).name == "rollback-job"
