"""Generative checks: the invariants every allocation keeps, determinism, stability across
changes that do not concern a job, and what waiting reports."""

from __future__ import annotations

import random

from conftest import held
from hypothesis import given, settings
from hypothesis import strategies as st

from peer.scheduling import JOB_SCHEDULERS, JobDemand, PeerInfo, TaskDemand, allocate, waiting

TAGS = ("gpu", "ssd")
EXAMPLES = settings(max_examples=200, deadline=None)


@st.composite
def peer_lists(draw, max_size: int = 30) -> list[PeerInfo]:
    count = draw(st.integers(0, max_size))
    groups = draw(st.integers(1, 6))
    return [
        PeerInfo(
            f"p{i:02d}",
            f"g{draw(st.integers(0, groups - 1))}",
            frozenset(draw(st.sets(st.sampled_from(TAGS), max_size=2))),
        )
        for i in range(count)
    ]


@st.composite
def tasks(draw, name: str, tagged: bool) -> TaskDemand:
    low = draw(st.integers(1, 3))
    high = draw(st.one_of(st.none(), st.integers(low, low + 4)))
    tags = draw(st.sets(st.sampled_from(TAGS), max_size=1)) if tagged else set()
    return TaskDemand(name, low, high, frozenset(tags), draw(st.sampled_from([None, 20, 50, 80])))


@st.composite
def jobs(draw, id_: str, tagged: bool = True, schedulers=("balanced", "percentage", "colocated")):
    size = draw(st.integers(1, 3))
    return JobDemand(
        id_,
        tuple(draw(tasks(f"t{i}", tagged and draw(st.booleans()))) for i in range(size)),
        draw(st.sampled_from(schedulers)),
        draw(st.sampled_from([None, 25, 50, 100])),
    )


@st.composite
def job_lists(draw, tagged: bool = True, max_size: int = 4) -> list[JobDemand]:
    return [draw(jobs(f"j{k}", tagged)) for k in range(draw(st.integers(0, max_size)))]


schedulers = st.sampled_from(JOB_SCHEDULERS)


def check_invariants(allocation, demands, cluster) -> None:
    by_id = {p.id: p for p in cluster}
    placed = [p for job in allocation.values() for ps in job.values() for p in ps]
    assert len(placed) == len(set(placed)), "a peer is on two tasks"
    assert set(placed) <= set(by_id)
    for job in demands:
        got = allocation[job.id]
        assert list(got) == [t.name for t in job.tasks]
        total = sum(len(ps) for ps in got.values())
        for task in job.tasks:
            ps = got[task.name]
            assert list(ps) == sorted(ps)
            assert task.max_peers is None or len(ps) <= task.max_peers
            assert all(task.required_tags <= by_id[p].tags for p in ps)
            assert total == 0 or len(ps) >= task.min_peers
        assert total == 0 or total >= job.minimum
        if job.task_scheduler == "colocated" and total:
            for task in job.tasks:
                groups = [by_id[p].group for p in got[task.name]]
                first = [by_id[p].group for p in got[job.tasks[0].name]]
                assert sorted(groups) == sorted(first) == sorted(set(first))


@EXAMPLES
@given(schedulers, job_lists(), peer_lists())
def test_every_allocation_keeps_the_invariants(scheduler, demands, cluster):
    check_invariants(allocate(scheduler, demands, cluster, None), demands, cluster)


@EXAMPLES
@given(schedulers, job_lists(), peer_lists(), peer_lists(), st.randoms(use_true_random=False))
def test_same_input_same_allocation_whatever_the_peer_order(
    scheduler, demands, cluster, before, rnd
):
    previous = allocate(scheduler, demands, before, None)
    first = allocate(scheduler, demands, cluster, previous)
    shuffled = list(cluster)
    rnd.shuffle(shuffled)
    assert allocate(scheduler, demands, shuffled, previous) == first
    assert allocate(scheduler, demands, cluster, previous) == first
    check_invariants(first, demands, cluster)


@st.composite
def changes(draw):
    """A cluster, its jobs, and the same after one change: a job submitted or killed, a
    peer joining or leaving."""
    demands, cluster = draw(job_lists()), draw(peer_lists())
    kind = draw(st.sampled_from(["submit", "kill", "join", "leave"]))
    after_jobs, after_peers = list(demands), list(cluster)
    if kind == "submit":
        after_jobs.append(draw(jobs("new")))
    elif kind == "kill" and demands:
        after_jobs.pop(draw(st.integers(0, len(demands) - 1)))
    elif kind == "join":
        after_peers.append(PeerInfo("p99", f"g{draw(st.integers(0, 6))}", frozenset()))
    elif kind == "leave" and cluster:
        after_peers.pop(draw(st.integers(0, len(cluster) - 1)))
    return demands, cluster, after_jobs, after_peers


@EXAMPLES
@given(schedulers, changes())
def test_a_task_that_does_not_shrink_keeps_its_present_peers(scheduler, change):
    demands, cluster, after_jobs, after_peers = change
    before = allocate(scheduler, demands, cluster, None)
    after = allocate(scheduler, after_jobs, after_peers, before)
    check_invariants(after, after_jobs, after_peers)
    present = {p.id for p in after_peers}
    for job in after_jobs:
        old = before.get(job.id)
        if old is None:
            continue
        if job.task_scheduler == "colocated" and any(
            p not in present for ps in old.values() for p in ps
        ):
            continue  # a group that lost a peer of the pipeline is let go as a whole
        for task in job.tasks:
            if len(after[job.id][task.name]) >= len(old[task.name]):
                assert {p for p in old[task.name] if p in present} <= set(after[job.id][task.name])


def bounded(draw, id_: str) -> JobDemand:
    """An untagged job with a max on every task, so it saturates."""
    size = draw(st.integers(1, 3))
    return JobDemand(
        id_,
        tuple(TaskDemand(f"t{i}", 1, draw(st.integers(1, 4))) for i in range(size)),
        draw(st.sampled_from(["balanced", "percentage"])),
    )


@EXAMPLES
@given(st.data(), peer_lists())
def test_submitting_a_job_does_not_move_a_saturated_job_while_peers_remain(data, cluster):
    first = bounded(data.draw, "first")
    before = allocate("greedy", [first], cluster, None)
    if held(before, "first") == len(cluster):
        return  # saturated with no peer to spare, or not saturated
    other = data.draw(jobs("other"))
    after = allocate("greedy", [first, other], cluster, before)
    assert after["first"] == before["first"]


@EXAMPLES
@given(st.data(), peer_lists())
def test_removing_a_peer_of_another_job_does_not_move_the_first_job(data, cluster):
    demands = [bounded(data.draw, "first"), *data.draw(job_lists(max_size=3))]
    before = allocate("greedy", demands, cluster, None)
    others = sorted(p for j in demands[1:] for ps in before[j.id].values() for p in ps)
    if not others:
        return
    gone = data.draw(st.sampled_from(others))
    after = allocate("greedy", demands, [p for p in cluster if p.id != gone], before)
    assert after["first"] == before["first"]


@EXAMPLES
@given(schedulers, job_lists(), peer_lists())
def test_waiting_reports_exactly_the_jobs_without_peers(scheduler, demands, cluster):
    allocation = allocate(scheduler, demands, cluster, None)
    report = waiting(demands, cluster, allocation)
    assert set(report) == {j.id for j in demands if held(allocation, j.id) == 0}
    assert all(report[j.id] == j.minimum for j in demands if j.id in report)


@EXAMPLES
@given(
    st.sampled_from(["greedy", "balanced"]),
    job_lists(tagged=False),
    st.integers(0, 30),
)
def test_an_untagged_waiting_job_needs_more_than_the_idle_peers(scheduler, demands, count):
    cluster = [PeerInfo(f"p{i:02d}", f"g{i % 3}", frozenset()) for i in range(count)]
    demands = [j for j in demands if j.task_scheduler != "colocated"]
    allocation = allocate(scheduler, demands, cluster, None)
    idle = count - sum(held(allocation, j.id) for j in demands)
    assert all(need > idle for need in waiting(demands, cluster, allocation).values())


def test_shuffling_a_large_cluster_changes_nothing():
    cluster = [
        PeerInfo(f"p{i:04d}", f"g{i // 8}", frozenset({"gpu"} if i % 7 else ())) for i in range(800)
    ]
    demands = [
        JobDemand(
            f"j{k}",
            tuple(
                TaskDemand(f"t{i}", required_tags=frozenset({"gpu"}) if i == 0 else frozenset())
                for i in range(4)
            ),
            ts,
        )
        for k, ts in enumerate(["balanced", "colocated", "percentage", "balanced"])
    ]
    expected = allocate("balanced", demands, cluster, None)
    shuffled = list(cluster)
    random.Random(7).shuffle(shuffled)
    assert allocate("balanced", demands, shuffled, None) == expected
    check_invariants(expected, demands, cluster)
