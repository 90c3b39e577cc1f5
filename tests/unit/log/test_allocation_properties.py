"""Allocation as the log keeps it, under random runs of membership and job entries: the
invariants hold after every entry, versions move exactly when a job's peers do, and the same
log always gives the same replica."""

from __future__ import annotations

import itertools
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from peer.log.allocation import active_peers
from peer.log.apply import apply_entry
from peer.log.entries.group_leave import GROUP_LEAVE
from peer.log.entries.jobs import COMPLETE_JOB, KILL_JOB, SUBMIT_JOB
from peer.log.entries.leave import EXIT as MEMBER_EXIT
from peer.log.entries.leave import LEAVE as MEMBER_LEAVE
from peer.log.entries.recovery import task_recovered
from peer.log.entries.virtual_peers import ADD_VIRTUAL_PEER, LEAVE_CLUSTER
from peer.log.entry import Entry
from peer.log.replica import Replica

GROUPS = ("g0", "g1", "g2", "g3")
TAGS = ("ssd", "gpu")


@st.composite
def jobs(draw: st.DrawFn) -> dict:
    functions = draw(st.integers(0, 2))
    names = ["in", *(f"f{i}" for i in range(functions)), "out"]
    catalog = []
    for i, name in enumerate(names):
        kind = "input" if i == 0 else "output" if name == "out" else "function"
        task = {"name": name, "kind": kind, "flux_policy": draw(st.sampled_from(
            ["kill", "continue", "recover"]))}  # fmt: skip
        task["plugin" if kind != "function" else "fn"] = "nowhere:x"
        low = draw(st.integers(1, 2))
        task["min_peers"] = low
        if draw(st.booleans()):
            task["max_peers"] = low + draw(st.integers(0, 2))
        if draw(st.booleans()):
            task["required_tags"] = [draw(st.sampled_from(TAGS))]
        catalog.append(task)
    workflow = [[a, b] for a, b in itertools.pairwise(names)]
    doc = {"workflow": workflow, "catalog": catalog, "barrier_period": None}
    return local_recovery(draw, doc) if draw(st.booleans()) else doc


def local_recovery(draw: st.DrawFn, doc: dict) -> dict:
    """The job with local recovery on, one way or another: checkpoints, a fixed number of
    peers a task (so that peers are left free to stand by and take over), engines that
    replay or not, and standbys for the job or some tasks."""
    catalog = doc["catalog"]
    for task in catalog:
        task["max_peers"] = task["min_peers"]
    for task in catalog[1:-1]:
        task["engine"] = draw(st.sampled_from(["python", "python", "arrow", "spark"]))
        replayable = task["engine"] != "spark"  # a standby elsewhere is refused at submit
        task["standby"] = draw(st.sampled_from([None, True, False] if replayable else [None]))
    how = draw(st.sampled_from([{"local_recovery": True}, {"standby": True}, {}]))
    if not how and (len(catalog) == 2 or catalog[1]["engine"] == "spark"):
        how = {"local_recovery": True}
    if not how:
        catalog[1]["standby"] = True
    return {**doc, **how, "barrier_period": 1.0, "causal_depth": draw(st.integers(1, 2))}


def steps(draw: st.DrawFn, replica: Replica) -> Entry:
    """One entry that makes sense for ``replica`` (or, now and then, one that does not)."""
    choice = draw(st.sampled_from(
        ["peer", "peer", "leave", "group", "submit", "kill", "done", "depart", "exit",
         "recovered", "fail", "fail"]
    ))  # fmt: skip
    peers = sorted(replica.peers)
    running = function_peers(replica)
    if choice == "fail" and running:
        peer = draw(st.sampled_from(running))
        return LEAVE_CLUSTER.entry(id=peer, group=replica.group_of(peer))
    if choice == "recovered" and replica.recovering:
        job = draw(st.sampled_from(sorted(replica.recovering)))
        peer = draw(st.sampled_from(sorted(replica.recovering[job])))
        version = replica.allocation_versions[job] - draw(st.sampled_from([0, 0, 1]))
        return task_recovered(job, peer, version)
    if choice == "peer":
        group = draw(st.sampled_from(GROUPS))
        tags = draw(st.lists(st.sampled_from(TAGS), max_size=2, unique=True))
        apart = draw(st.sampled_from([{}, {"peer_site": "w0"}, {"peer_site": "w1"}]))
        return ADD_VIRTUAL_PEER.entry(
            id=f"p{replica.version + 1}", group=group, tags=tags, site="s", **apart
        )
    if choice == "leave" and peers:
        peer = draw(st.sampled_from(peers))
        return LEAVE_CLUSTER.entry(id=peer, group=replica.group_of(peer))
    if choice == "depart":
        return MEMBER_LEAVE.entry(id=draw(st.sampled_from(GROUPS)))
    if choice == "exit":
        return MEMBER_EXIT.entry(id=draw(st.sampled_from(GROUPS)))
    if choice == "group":
        return GROUP_LEAVE.entry(id=draw(st.sampled_from(GROUPS)))
    if choice == "kill" and replica.job_order:
        return KILL_JOB.entry(id=draw(st.sampled_from(list(replica.job_order))))
    if choice == "done" and replica.job_order:
        job = draw(st.sampled_from(list(replica.job_order)))
        outs = replica.allocations[job].get("out", ())
        peer = draw(st.sampled_from(outs)) if outs else "nobody"
        return COMPLETE_JOB.entry(id=job, peer=peer, version=replica.allocation_versions[job])
    return SUBMIT_JOB.entry(id=f"j{replica.version + 1}", job=draw(jobs()))


def function_peers(replica: Replica) -> list[str]:
    """The peers of the function tasks of jobs with local recovery: those a takeover replaces."""
    return sorted(
        p
        for j, tasks in replica.allocations.items()
        if replica.jobs[j].local_recovery_on
        for t, ps in tasks.items()
        if replica.jobs[j].task(t).kind == "function"
        for p in ps
    )


def check(old: Replica, new: Replica) -> None:
    active = set(new.peers)
    seen: set[str] = set()
    assert set(new.allocations) == set(new.jobs) == set(new.job_order)
    for job_id, tasks in new.allocations.items():
        job = new.jobs[job_id]
        held = [p for ps in tasks.values() for p in ps]
        assert set(held) <= active
        assert not {new.group_of(p) for p in held} & set(new.exiting), "an exiting member works"
        assert not seen & set(held), "a peer works on two tasks"
        assert len(held) == len(set(held))
        seen.update(held)
        for task in job.catalog:
            count = len(tasks[task.name])
            assert task.max_peers is None or count <= task.max_peers
            relaxed = job_id in new.started and task.flux_policy == "continue"
            assert not held or count >= (1 if relaxed else task.min_peers)
        check_versions(old, new, job_id)
        check_standbys(new, job_id, held)
    assert set(new.standbys) <= set(new.jobs)
    assert set(new.takeovers) | set(new.recovering) <= set(new.jobs)


def as_sets(tasks) -> dict[str, frozenset[str]]:
    return {task: frozenset(peers) for task, peers in tasks.items()}


def check_versions(old: Replica, new: Replica, job_id: str) -> None:
    """A new version exactly when the job's peers changed other than by takeovers, which end
    with it; a takeover puts its peer in the seat of a peer no longer active (failed, or of a
    member exiting, whose seats standbys take over) and remembers the seat's first peer."""
    job, tasks = new.jobs[job_id], new.allocations[job_id]
    takeovers = new.takeovers.get(job_id, {})
    recovering = new.recovering.get(job_id, frozenset())
    if new.allocation_versions[job_id] == new.version:
        assert old.allocations.get(job_id) is None or as_sets(old.allocations[job_id]) != as_sets(
            tasks
        )
        assert not takeovers
        assert not recovering
        return
    before = old.allocations[job_id]
    assert set(before) == set(tasks)
    active = {peer.id for peer in active_peers(new)}  # an exiting member's peers are not
    for task, peers in tasks.items():
        assert len(peers) == len(before[task])
        for was, now in zip(before[task], peers, strict=True):
            if was != now:
                assert was not in active
                assert takeovers[now] == old.takeovers.get(job_id, {}).get(was, was)
                assert job.task(task).kind == "function"
    assert set(recovering) <= set(takeovers)
    assert set(takeovers) <= {p for ps in tasks.values() for p in ps}
    assert len(recovering) <= job.causal_depth


def check_standbys(new: Replica, job_id: str, held: list[str]) -> None:
    """Standbys stand by for running peers of tasks that keep one, from other groups, free,
    one peer each."""
    job = new.jobs[job_id]
    standbys = new.standbys.get(job_id, {})
    allocated = {p for tasks in new.allocations.values() for ps in tasks.values() for p in ps}
    others = [s for j, per in new.standbys.items() if j != job_id for s in per.values()]
    assert len(set(standbys.values())) == len(standbys)
    assert not set(standbys.values()) & set(others)
    for running, standby in standbys.items():
        assert running in held
        assert job.has_standby(new.task_of(running)[1])
        assert standby in new.peers
        assert standby not in allocated
        assert new.group_of(standby) != new.group_of(running)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_allocation_invariants_hold_after_every_entry(data):
    replica = Replica().evolve(groups=Replica().groups.update(GROUPS))
    start, log = replica, []
    for position in range(data.draw(st.integers(1, 40))):
        entry = steps(data.draw, replica).at(position)
        log.append(entry)
        new = apply_entry(replica, entry).new
        check(replica, new)
        replica = new
    again = start
    for entry in log:
        again = apply_entry(again, entry).new
    assert again == replica
    assert Replica.from_json(json.loads(json.dumps(replica.to_json()))) == replica
