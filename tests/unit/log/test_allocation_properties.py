"""Allocation as the log keeps it, under random runs of membership and job entries: the
invariants hold after every entry, versions move exactly when a job's peers do, and the same
log always gives the same replica."""

from __future__ import annotations

import itertools
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from peer.log.apply import apply_entry
from peer.log.entries.group_leave import GROUP_LEAVE
from peer.log.entries.jobs import COMPLETE_JOB, KILL_JOB, SUBMIT_JOB
from peer.log.entries.leave import EXIT as MEMBER_EXIT
from peer.log.entries.leave import LEAVE as MEMBER_LEAVE
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
    return {"workflow": workflow, "catalog": catalog, "barrier_period": None}


def steps(draw: st.DrawFn, replica: Replica) -> Entry:
    """One entry that makes sense for ``replica`` (or, now and then, one that does not)."""
    choice = draw(st.sampled_from(
        ["peer", "peer", "leave", "group", "submit", "kill", "done", "depart", "exit"]
    ))  # fmt: skip
    peers = sorted(replica.peers)
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
        moved = old.allocations.get(job_id) != tasks
        assert (new.allocation_versions[job_id] == new.version) == moved


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
