"""The gauges a group serves come from a snapshot it takes at scrape time: the collector reads
only the snapshot, and the group's figures are pure functions of its replica and what it runs;
a store that cannot answer leaves out what needs it instead of failing the scrape."""

from __future__ import annotations

from types import SimpleNamespace

from pyrsistent import pmap, pset

from peer.cluster.group import epoch_figures, job_figures, member_figures, ring_figures
from peer.job.spec import Job, Task
from peer.log.replica import Replica
from peer.metrics import GroupCollector, GroupSnapshot, LogFigures

RING = Replica(version=9, groups=pset(["a", "b"]), pairs=pmap({"a": "b", "b": "a"}))


def snapshot(
    replica: Replica = RING,
    *,
    tail: int | None = 9,
    origin: int = -1,
    reported: frozenset[str] = frozenset(),
    coordinators: dict | None = None,
    publications: int | None = None,
) -> GroupSnapshot:
    """What group "a" would take of ``replica``, as peer.cluster.group's figures make it."""
    return GroupSnapshot(
        ring=ring_figures(replica, "a", ["p1"], set(reported)),
        members=member_figures(replica, None),
        log=LogFigures(replica.version, origin, tail),
        jobs=job_figures(replica),
        epochs=epoch_figures(coordinators or {}),
        publications=publications,
    )


def gauges(value: GroupSnapshot | None) -> dict[str, float]:
    return {
        sample.name: sample.value
        for family in GroupCollector(lambda: value).collect()
        for sample in family.samples
        if not sample.labels
    }


def labelled(value: GroupSnapshot, name: str) -> dict[str, float]:
    return {
        sample.labels["onyx_job"]: sample.value
        for family in GroupCollector(lambda: value).collect()
        for sample in family.samples
        if sample.name == name
    }


def test_the_log_gauges_follow_the_store_s_tail():
    served = gauges(snapshot(tail=12, origin=4))
    assert served["onyx_log_position"] == 9
    assert served["onyx_log_tail_position"] == 12
    assert served["onyx_log_lag"] == 3
    assert served["onyx_log_length"] == 8
    assert served["onyx_log_origin_position"] == 4


def test_an_unreachable_store_leaves_out_what_needs_it():
    served = gauges(snapshot(tail=None))
    assert served["onyx_log_position"] == 9
    assert "onyx_log_lag" not in served
    assert "onyx_log_tail_position" not in served
    assert served["onyx_ring_groups"] == 2


def test_a_watch_target_reported_dead_is_not_alive_until_the_ring_closes():
    assert gauges(snapshot())["onyx_ring_watch_target_alive"] == 1
    assert gauges(snapshot(reported=frozenset({"b"})))["onyx_ring_watch_target_alive"] == 0
    alone = Replica(version=3, groups=pset(["a"]))
    assert gauges(snapshot(alone, tail=3))["onyx_ring_watch_target_alive"] == 1


def test_jobs_count_as_running_with_peers_and_waiting_without():
    catalog = (Task("in", "input", plugin="x:y"),)
    replica = Replica(
        version=5,
        jobs=pmap(
            {
                "j": Job("j", catalog, barrier_period=2.0),
                "k": Job("k", catalog, barrier_period=None),
            }
        ),
        allocations=pmap({"j": pmap({"in": ("p1", "p2")})}),
        allocation_versions=pmap({"j": 4}),
    )
    value = snapshot(replica, tail=5)
    assert labelled(value, "onyx_job_peers") == {"j": 2, "k": 0}
    assert labelled(value, "onyx_job_waiting") == {"j": 0, "k": 1}
    assert labelled(value, "onyx_job_allocation_version") == {"j": 4}
    assert labelled(value, "onyx_job_barrier_period_seconds") == {"j": 2.0}


def test_epochs_come_from_the_coordinators_the_group_runs():
    coordinator = SimpleNamespace(epoch=7, committed_number=lambda: 6, last_commit=100.0)
    value = snapshot(coordinators={("j", 4): coordinator}, publications=3)
    assert labelled(value, "onyx_job_epoch") == {"j": 7}
    assert labelled(value, "onyx_job_committed_epoch") == {"j": 6}
    assert labelled(value, "onyx_job_last_commit_timestamp_seconds") == {"j": 100.0}
    assert gauges(value)["onyx_aeron_publications"] == 3


def test_a_group_between_incarnations_serves_no_state():
    assert list(GroupCollector(lambda: None).collect()) == []


def test_members_are_counted_by_status_and_every_status_is_shown():
    replica = RING.evolve(leaving=pset({"b"}), left=pset({"x", "y"}), removed=pset({"y"}))
    family = next(
        f for f in GroupCollector(lambda: snapshot(replica)).collect() if f.name == "onyx_members"
    )
    counts = {sample.labels["status"]: sample.value for sample in family.samples}
    assert counts == {
        "joining": 0, "up": 1, "leaving": 1, "exiting": 0, "down": 1, "removed": 1
    }  # fmt: skip
    assert "onyx_members_unreachable" not in gauges(snapshot(replica))
