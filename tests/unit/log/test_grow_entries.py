"""Growth at a pause: a running job with checkpoints that the schedulers would give more peers
keeps its allocation (held back) until grow-job, written once it stands still at a commit, lets
it grow; a job without checkpoints grows at once; a stale grow-job changes nothing."""

from __future__ import annotations

import pytest

from peer.log.apply import apply_entry, kind_of
from peer.log.entries.grow import GROW_JOB, grow_job
from peer.log.entries.jobs import SUBMIT_JOB
from peer.log.entries.virtual_peers import ADD_VIRTUAL_PEER
from peer.log.entry import Entry, InvalidEntry
from peer.log.replica import Replica
from tests.unit.log.local_recovery import JOB, cluster, job_doc, singles, step

WIDE = {"f": {"n_peers": None, "max_peers": 3}}
"""Task f takes up to three peers; the others one each."""


def running(doc: dict, peers: int) -> Replica:
    """The job on ``peers`` groups of one peer, and one more joined group with no peer yet."""
    replica = cluster(doc, singles(peers))
    return replica.evolve(groups=replica.groups.add("spare"))


def returned(replica: Replica, count: int = 1) -> Replica:
    """``count`` peers come (back) into the spare group."""
    for i in range(count):
        replica = step(replica, ADD_VIRTUAL_PEER.entry(id=f"back{i}", group="spare"))
    return replica


def test_a_running_job_with_checkpoints_is_held_back_then_grows_on_grow_job():
    before = running(job_doc(WIDE, barrier_period=1.0), 6)
    assert len(before.allocations[JOB]["f"]) == 2, "five tasks, six peers"
    version = before.allocation_versions[JOB]
    held = returned(before)
    assert held.allocations[JOB] == before.allocations[JOB]
    assert held.allocation_versions[JOB] == version
    assert held.held_back == {JOB}
    grown = step(held, grow_job(JOB, version))
    assert len(grown.allocations[JOB]["f"]) == 3
    assert set(before.allocations[JOB]["f"]) < set(grown.allocations[JOB]["f"])
    assert grown.allocation_versions[JOB] == grown.version
    assert not grown.held_back
    assert not grown.growing
    assert Replica.from_json(held.to_json()) == held


def test_a_job_without_checkpoints_grows_at_once():
    before = running(job_doc(WIDE, barrier_period=None), 6)
    grown = returned(before)
    assert len(grown.allocations[JOB]["f"]) == 3
    assert not grown.held_back


def test_a_job_not_yet_running_is_not_held_back():
    """A job waiting for peers for some task restores nothing by growing: it is given them;
    once running, it is held back."""
    waiting = running(job_doc(WIDE, barrier_period=1.0), 3)
    assert not all(waiting.allocations[JOB].values())
    started = returned(waiting, 2)
    assert all(started.allocations[JOB].values())
    assert not started.held_back
    assert returned(started.evolve(groups=started.groups.add("more")), 3).held_back == {JOB}


def test_a_job_let_go_of_its_peers_is_held_back_no_longer():
    """The peer it would have grown onto leaves again: it is no longer held back, and its
    coordinator lets it go on."""
    held = returned(running(job_doc(WIDE, barrier_period=1.0), 6))
    assert held.held_back == {JOB}
    gone = step(held, Entry("leave-cluster", {"id": "back0", "group": "spare"}))
    assert not gone.held_back
    assert gone.allocation_versions[JOB] == held.allocation_versions[JOB]


def test_peers_a_held_job_leaves_free_do_not_grow_another_at_once():
    """The peers the first job would have had go to the second job, which is held back too."""
    second = "k"
    before = running(job_doc(WIDE, barrier_period=1.0), 6)
    with_second = step(
        before.evolve(groups=before.groups.add("more")),
        SUBMIT_JOB.entry(id=second, job=job_doc(WIDE, barrier_period=1.0)),
    )
    for i in range(5):
        with_second = step(with_second, ADD_VIRTUAL_PEER.entry(id=f"m{i}", group="more"))
    assert all(with_second.allocations[second].values())
    held = returned(with_second, 2)
    assert held.held_back == {JOB, second}
    for job in (JOB, second):
        assert held.allocations[job] == with_second.allocations[job]


@pytest.mark.parametrize(
    "change",
    [lambda version: (JOB, version - 1), lambda version: ("other", version)],
)
def test_a_stale_or_unknown_grow_job_changes_nothing(change):
    held = returned(running(job_doc(WIDE, barrier_period=1.0), 6))
    job, version = change(held.allocation_versions[JOB])
    t = apply_entry(held, grow_job(job, version).at(held.version + 1))
    assert t.diff is None
    assert t.new.allocations is held.allocations


def test_a_grow_job_for_a_job_not_held_back_changes_nothing():
    before = running(job_doc(WIDE, barrier_period=1.0), 6)
    t = apply_entry(before, grow_job(JOB, before.allocation_versions[JOB]).at(before.version + 1))
    assert t.diff is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"job": JOB}, "argument 'version' must be a non-empty int, got None"),
        ({"job": "", "version": 3}, "argument 'job' must be a non-empty str"),
        ({"job": JOB, "version": True}, "argument 'version' must be an int"),
    ],
)
def test_bad_arguments_are_refused(args, message):
    held = returned(running(job_doc(WIDE, barrier_period=1.0), 6))
    entry = Entry(GROW_JOB.name, args)
    with pytest.raises(InvalidEntry, match=message):
        kind_of(entry).apply(held, entry)
    assert apply_entry(held, entry.at(held.version + 1)).new.growing is held.growing
