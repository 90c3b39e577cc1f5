"""allocate and waiting on small concrete clusters, with the exact allocations expected."""

from __future__ import annotations

import pytest
from conftest import job, peers, plain

from peer.scheduling import JobDemand, PeerInfo, TaskDemand, allocate, waiting

GPU = frozenset({"gpu"})


def test_greedy_gives_everything_to_the_first_job_until_it_is_saturated():
    jobs = [job("a", "in", TaskDemand("out", max_peers=2)), job("b", TaskDemand("x", max_peers=3))]
    assert plain(allocate("greedy", jobs, peers(10), None)) == {
        "a": {"in": ["p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7"], "out": ["p8", "p9"]},
        "b": {"x": []},
    }


def test_balanced_splits_jobs_evenly_and_tasks_evenly_in_topological_order():
    # 5 and 5, but b saturates at 3 and its surplus goes to a: 7 as 3, 2, 2.
    jobs = [job("a", "in", "mid", "out"), job("b", TaskDemand("x", max_peers=3))]
    assert plain(allocate("balanced", jobs, peers(10), None)) == {
        "a": {"in": ["p0", "p1", "p2"], "mid": ["p3", "p4"], "out": ["p5", "p6"]},
        "b": {"x": ["p7", "p8", "p9"]},
    }


def test_percentage_job_and_task_schedulers():
    # Half the peers each; a's 5 are 1 + 1 minimums and 3 more split 75:25 (2.25, 0.75).
    tasks = (TaskDemand("in", percentage=75), TaskDemand("out", percentage=25))
    jobs = [
        JobDemand("a", tasks, task_scheduler="percentage", percentage=50),
        job("b", "x", percentage=50),
        job("c", "y"),
    ]
    assert plain(allocate("percentage", jobs, peers(10), None)) == {
        "a": {"in": ["p0", "p1", "p2"], "out": ["p3", "p4"]},
        "b": {"x": ["p5", "p6", "p7", "p8", "p9"]},
        "c": {"y": []},
    }


def test_colocated_gives_every_task_one_peer_of_each_group_it_uses():
    jobs = [job("a", "read", "write", task_scheduler="colocated"), job("b", "x")]
    assert plain(allocate("greedy", jobs, peers(9, per_group=3), None)) == {
        "a": {"read": ["p0", "p3", "p6"], "write": ["p1", "p4", "p7"]},
        "b": {"x": ["p2", "p5", "p8"]},
    }


def test_colocated_uses_no_group_too_small_for_the_whole_pipeline():
    cluster = [*peers(2, per_group=2), PeerInfo("q0", "lone")]
    allocation = allocate("greedy", [job("a", "r", "w", task_scheduler="colocated")], cluster)
    assert plain(allocation) == {"a": {"r": ["p0"], "w": ["p1"]}}


def test_tagged_tasks_get_tagged_peers_and_untagged_work_takes_untagged_peers_first():
    cluster = [*peers(4), *peers(2, tags=GPU, prefix="q")]
    jobs = [job("a", "prep", TaskDemand("train", max_peers=1, required_tags=GPU))]
    assert plain(allocate("balanced", jobs, cluster, None)) == {
        "a": {"prep": ["p0", "p1", "p2", "p3", "q1"], "train": ["q0"]},
    }


def test_a_job_whose_tasks_all_need_a_tag_takes_the_tagged_peers_beside_untagged_ones():
    cluster = [*peers(2), *peers(4, tags=GPU, prefix="q")]
    tasks = [TaskDemand(name, max_peers=cap, required_tags=GPU)
             for name, cap in [("r", 1), ("s", None), ("c", None), ("w", 1)]]  # fmt: skip
    allocation = allocate("balanced", [job("a", *tasks)], cluster, None)
    assert sorted(p for ps in plain(allocation)["a"].values() for p in ps) == [
        "q0",
        "q1",
        "q2",
        "q3",
    ]


def test_a_job_whose_tags_no_peer_has_waits():
    jobs = [job("a", "prep", TaskDemand("train", required_tags=GPU)), job("b", "x")]
    allocation = allocate("greedy", jobs, peers(3), None)
    assert plain(allocation) == {"a": {"prep": [], "train": []}, "b": {"x": ["p0", "p1", "p2"]}}
    assert waiting(jobs, peers(3), allocation) == {"a": 2}


def test_waiting_counts_a_colocated_jobs_largest_minimum_on_every_task():
    jobs = [job("a", TaskDemand("r", min_peers=2), "w", task_scheduler="colocated")]
    allocation = allocate("greedy", jobs, peers(4, per_group=2), None)
    assert plain(allocation) == {"a": {"r": ["p0", "p2"], "w": ["p1", "p3"]}}
    assert waiting(jobs, peers(3, per_group=2), allocation) == {}
    assert waiting(jobs, [], allocation) == {"a": 4}


def test_a_peer_keeps_its_task_when_the_task_still_has_room():
    jobs = [job("a", "t"), job("b", "u")]
    previous = {"a": {"t": ("p2", "p3")}}
    assert plain(allocate("balanced", jobs, peers(4), previous)) == {
        "a": {"t": ["p2", "p3"]},
        "b": {"u": ["p0", "p1"]},
    }


def test_a_shrinking_task_keeps_its_lowest_previous_peers():
    previous = allocate("balanced", [job("a", "t")], peers(4), None)
    assert plain(allocate("balanced", [job("a", "t"), job("b", "u")], peers(4), previous)) == {
        "a": {"t": ["p0", "p1"]},
        "b": {"u": ["p2", "p3"]},
    }


def test_a_new_idle_peer_does_not_move_a_saturated_job():
    jobs = [job("a", TaskDemand("t", max_peers=2))]
    previous = {"a": {"t": ("p2", "p3")}}
    assert plain(allocate("greedy", jobs, peers(5), previous)) == {"a": {"t": ["p2", "p3"]}}


def test_previous_entries_for_gone_peers_jobs_and_tasks_are_ignored():
    previous = {"a": {"t": ("gone", "p1"), "old": ("p0",)}, "z": {"t": ("p2",)}}
    assert plain(allocate("greedy", [job("a", "t")], peers(2), previous)) == {
        "a": {"t": ["p0", "p1"]}
    }


def test_an_allocation_lists_every_job_and_task_and_is_read_only():
    allocation = allocate("greedy", [job("a", "t")], [], None)
    assert plain(allocation) == {"a": {"t": []}}
    with pytest.raises(TypeError):
        allocation["b"] = {}  # type: ignore[index]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: allocate("fair", [], [], None), "unknown job scheduler"),
        (lambda: allocate("greedy", [job("a", "t"), job("a", "u")], [], None), "job ids"),
        (lambda: allocate("greedy", [], [*peers(1), *peers(1)], None), "peer ids"),
        (lambda: TaskDemand("t", min_peers=0), "min_peers"),
        (lambda: TaskDemand("t", min_peers=2, max_peers=1), "max_peers"),
        (lambda: job("a", "t", "t"), "task names"),
        (lambda: job("a", "t", task_scheduler="spread"), "unknown task scheduler"),
        (lambda: job("a", "t", percentage=120), "percentage"),
    ],
)
def test_malformed_demands_are_refused(call, message):
    with pytest.raises(ValueError, match=message):
        call()
