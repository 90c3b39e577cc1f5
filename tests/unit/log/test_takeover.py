"""Takeover through the log: a failed function peer of a job with local recovery is replaced in
its seat, by its standby or a free peer of another group, without a new allocation version and
without moving any other peer; whatever the logs do not cover rolls the job back as a whole."""

from __future__ import annotations

from pyrsistent import pmap, pset

from peer.log.entries.recovery import task_recovered
from peer.log.entries.virtual_peers import LEAVE_CLUSTER
from peer.log.replica import Replica
from tests.unit.log.local_recovery import JOB, cluster, down, job_doc, peer_of, singles, step

STANDBY = job_doc(standby=True)


def assert_taken_over(before: Replica, after: Replica, replaced: dict[str, str]) -> None:
    """``replaced`` (failed peer to replacement) took their seats, nothing else moved."""
    assert after.allocation_versions[JOB] == before.allocation_versions[JOB]
    for task, peers in before.allocations[JOB].items():
        assert after.allocations[JOB][task] == tuple(replaced.get(p, p) for p in peers)
    for failed, replacement in replaced.items():
        origin = before.takeovers.get(JOB, pmap()).get(failed, failed)
        assert after.takeovers[JOB][replacement] == origin
        assert replacement in after.recovering[JOB]
        assert failed not in after.takeovers[JOB]


def assert_rolled_back(before: Replica, after: Replica) -> None:
    assert after.allocation_versions[JOB] == after.version != before.allocation_versions[JOB]
    assert JOB not in after.takeovers
    assert JOB not in after.recovering


def test_standbys_stand_by_for_every_running_peer_on_other_groups():
    replica = cluster(STANDBY, singles(10))
    standbys = replica.standbys[JOB]
    job = replica.jobs[JOB]
    running = {p for t, ps in replica.allocations[JOB].items() for p in ps if job.has_standby(t)}
    assert set(standbys) == running
    assert not set(standbys.values()) & running
    assert len(set(standbys.values())) == len(standbys)
    assert all(replica.group_of(r) != replica.group_of(s) for r, s in standbys.items())


def test_a_failed_function_peer_is_replaced_by_its_standby():
    before = cluster(STANDBY, singles(11))
    failed = peer_of(before, "f")
    standby = before.standbys[JOB][failed]
    after = down(before, failed)
    assert_taken_over(before, after, {failed: standby})
    assert after.recovering[JOB] == pset([standby])
    assert standby in after.standbys[JOB], "the replacement gets a standby of its own"
    assert failed not in after.standbys[JOB]


def test_without_a_standby_a_free_peer_of_another_group_takes_over():
    before = cluster(job_doc(local_recovery=True), singles(7))
    assert JOB not in before.standbys
    failed = peer_of(before, "h")
    free = sorted(set(before.peers) - {p for ps in before.allocations[JOB].values() for p in ps})
    after = down(before, failed)
    assert_taken_over(before, after, {failed: free[0]})


def test_a_free_peer_of_the_failed_peers_group_goes_with_it():
    doc = job_doc(local_recovery=True)
    failed = peer_of(cluster(doc, singles(5)), "h")
    group = f"g{failed[1:]}"
    before = cluster(doc, {**singles(5), group: [failed, "zz"], "g9": ["zy"]})
    assert peer_of(before, "h") == failed
    assert_taken_over(before, down(before, failed), {failed: "zy"})


def test_a_lone_virtual_peer_that_left_is_taken_over_within_its_live_group():
    doc = job_doc(local_recovery=True)
    failed = peer_of(cluster(doc, singles(5)), "h")
    group = f"g{failed[1:]}"
    before = cluster(doc, {**singles(5), group: [failed, "zz"]})
    after = step(before, LEAVE_CLUSTER.entry(id=failed, group=group))
    assert_taken_over(before, after, {failed: "zz"})


def test_local_recovery_off_rolls_back():
    before = cluster(job_doc(), singles(10))
    assert_rolled_back(before, down(before, peer_of(before, "f")))


def test_an_input_or_output_failure_rolls_back():
    for task in ("in", "out"):
        before = cluster(STANDBY, singles(10))
        assert_rolled_back(before, down(before, peer_of(before, task)))


def test_a_spark_task_failure_rolls_back():
    before = cluster(job_doc({"f": {"engine": "spark"}}, standby=True), singles(10))
    assert_rolled_back(before, down(before, peer_of(before, "f")))


def test_an_arrow_task_is_taken_over():
    before = cluster(job_doc({"h": {"engine": "arrow"}}, standby=True), singles(10))
    failed = peer_of(before, "h")
    assert_taken_over(before, down(before, failed), {failed: before.standbys[JOB][failed]})


def test_two_concurrent_failures_with_depth_one_roll_back():
    before = cluster(STANDBY, singles(10))
    assert_rolled_back(before, down(before, peer_of(before, "f"), peer_of(before, "h")))


def test_a_failure_while_another_peer_recovers_with_depth_one_rolls_back():
    before = cluster(STANDBY, singles(10))
    recovering = down(before, peer_of(before, "f"))
    assert recovering.recovering[JOB]
    assert_rolled_back(recovering, down(recovering, peer_of(recovering, "h")))


def test_adjacent_failures_roll_back_even_within_the_depth():
    before = cluster(job_doc(standby=True, causal_depth=2), singles(10))
    assert_rolled_back(before, down(before, peer_of(before, "f"), peer_of(before, "g")))
    recovering = down(before, peer_of(before, "f"))
    assert_rolled_back(recovering, down(recovering, peer_of(recovering, "g")))


def test_two_failures_apart_within_the_depth_are_both_taken_over():
    before = cluster(job_doc(standby=True, causal_depth=2), singles(10))
    f, h = peer_of(before, "f"), peer_of(before, "h")
    after = down(before, f, h)
    standbys = before.standbys[JOB]
    assert_taken_over(before, after, {f: standbys[f], h: standbys[h]})
    assert after.recovering[JOB] == pset([standbys[f], standbys[h]])


def test_no_replacement_rolls_back():
    before = cluster(job_doc(local_recovery=True), singles(5))
    assert_rolled_back(before, down(before, peer_of(before, "f")))


def test_a_replacement_without_the_tasks_tags_does_not_take_over():
    doc = job_doc({"f": {"required_tags": ["ssd"]}}, local_recovery=True)
    tags = {"g0": ["ssd"]}
    before = cluster(doc, singles(7), tags)
    failed = peer_of(before, "f")
    assert before.group_of(failed) in tags
    assert_rolled_back(before, down(before, failed))


def test_a_chain_of_takeovers_maps_to_the_seats_first_peer():
    before = cluster(STANDBY, singles(12))
    first = peer_of(before, "f")
    once = down(before, first)
    second = peer_of(once, "f")
    recovered = step(once, task_recovered(JOB, second, once.allocation_versions[JOB]))
    assert JOB not in recovered.recovering
    twice = down(recovered, second)
    third = peer_of(twice, "f")
    assert twice.takeovers[JOB] == {third: first}
    assert twice.allocation_versions[JOB] == before.allocation_versions[JOB]


def test_a_new_version_ends_the_takeovers():
    before = cluster(STANDBY, singles(10))
    once = down(before, peer_of(before, "f"))
    assert once.takeovers[JOB]
    assert_rolled_back(once, down(once, peer_of(once, "in")))
