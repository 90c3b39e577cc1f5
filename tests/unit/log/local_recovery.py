"""A cluster and a job with local recovery, built by applying log entries, for the takeover and
task-recovered tests: every peer has a group of its own unless told otherwise, so a group's
departure is its peers' failure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from hypothesis import strategies as st

from peer.log.allocation import reallocate
from peer.log.apply import apply_entry
from peer.log.entries.group_leave import GROUP_LEAVE
from peer.log.entries.jobs import SUBMIT_JOB
from peer.log.entries.recovery import task_recovered
from peer.log.entries.virtual_peers import ADD_VIRTUAL_PEER, LEAVE_CLUSTER
from peer.log.entry import Entry
from peer.log.replica import Replica

JOB = "j"
WORKFLOW = [["in", "f"], ["f", "g"], ["g", "out"], ["in", "h"], ["h", "out"]]
"""f and g are adjacent; h is adjacent to neither."""


def job_doc(tasks: Mapping[str, Mapping[str, Any]] | None = None, **options: Any) -> dict:
    """in -> f -> g -> out and in -> h -> out, one peer a task; ``tasks`` adds to a task's
    fields, ``options`` to the job's."""
    catalog = []
    for name in ("in", "f", "g", "h", "out"):
        kind = "input" if name == "in" else "output" if name == "out" else "function"
        task = {"name": name, "kind": kind, "n_peers": 1}
        task["fn" if kind == "function" else "plugin"] = "nowhere:x"
        catalog.append({**task, **(tasks or {}).get(name, {})})
    return {"workflow": WORKFLOW, "catalog": catalog, **options}


def step(replica: Replica, entry: Entry) -> Replica:
    return apply_entry(replica, entry.at(replica.version + 1)).new


def cluster(
    doc: Mapping[str, Any],
    groups: Mapping[str, Iterable[str]],
    tags: Mapping[str, list[str]] | None = None,
) -> Replica:
    """Joined ``groups`` (group to its peers, tags by group), then the job submitted."""
    replica = Replica().evolve(groups=Replica().groups.update(groups))
    for group, peers in sorted(groups.items()):
        for peer in peers:
            extra = {"tags": tags[group]} if tags and group in tags else {}
            replica = step(replica, ADD_VIRTUAL_PEER.entry(id=peer, group=group, **extra))
    return step(replica, SUBMIT_JOB.entry(id=JOB, job=dict(doc)))


def singles(count: int) -> dict[str, list[str]]:
    """``count`` groups of one peer each: g0 holds p0, and so on."""
    return {f"g{i}": [f"p{i}"] for i in range(count)}


def peer_of(replica: Replica, task: str) -> str:
    (peer,) = replica.allocations[JOB][task]
    return peer


def down(replica: Replica, *peers: str) -> Replica:
    """The groups of ``peers`` gone at the next position: one group-leave-cluster applied
    through the log for one group; several groups gone under one allocation (as when they
    die between two allocations) for more."""
    groups = sorted({replica.group_of(p) for p in peers})
    if len(groups) == 1:
        return step(replica, GROUP_LEAVE.entry(id=groups[0]))
    position = replica.version + 1
    changed = replica
    for group in groups:
        changed = GROUP_LEAVE.apply(changed, GROUP_LEAVE.entry(id=group))
    return reallocate(replica, changed, position).evolve(version=position)


SPARE_GROUPS = ("s0", "s1")
"""Joined groups with no peer at first, that peers are added to later."""


@st.composite
def local_recovery_logs(draw: st.DrawFn) -> tuple[Replica, list[Entry]]:
    """A cluster of groups of one or two peers running one job with local recovery (engines,
    standbys and depth drawn), and a log after it of departures of groups and of lone peers,
    peers added, and task-recovered entries, current or stale."""
    sizes = draw(st.lists(st.integers(1, 2), min_size=5, max_size=10))
    groups = {f"g{i}": [f"p{i}{'ab'[k]}" for k in range(n)] for i, n in enumerate(sizes)}
    engines = {name: draw(st.sampled_from(["python", "python", "arrow", "spark"]))
               for name in ("f", "g", "h")}  # fmt: skip
    tasks = {
        name: {
            "engine": engine,  # a standby on a spark task is refused at submit
            "standby": draw(st.sampled_from([None, None, True, False] if engine != "spark"
                                            else [None])),
        }
        for name, engine in engines.items()
    }  # fmt: skip
    doc = job_doc(
        tasks,
        local_recovery=True,
        standby=draw(st.booleans()),
        causal_depth=draw(st.integers(1, 2)),
    )
    start = cluster(doc, groups)
    start = start.evolve(groups=start.groups.update(SPARE_GROUPS))
    replica, log = start, []
    for _ in range(draw(st.integers(1, 8))):
        entry = _event(draw, replica).at(replica.version + 1)
        log.append(entry)
        replica = apply_entry(replica, entry).new
    return start, log


def _event(draw: st.DrawFn, replica: Replica) -> Entry:
    choice = draw(st.sampled_from(["group", "group", "peer", "recovered", "add"]))
    if choice == "recovered" and replica.recovering.get(JOB):
        peer = draw(st.sampled_from(sorted(replica.recovering[JOB])))
        version = replica.allocation_versions[JOB] - draw(st.sampled_from([0, 0, 1]))
        return task_recovered(JOB, peer, version)
    if choice == "peer" and replica.peers:
        peer = draw(st.sampled_from(replica.peers))
        return LEAVE_CLUSTER.entry(id=peer, group=replica.group_of(peer))
    if choice == "add":
        group = draw(st.sampled_from(SPARE_GROUPS))
        return ADD_VIRTUAL_PEER.entry(id=f"n{replica.version + 1}", group=group)
    live = sorted(g for g in replica.groups if replica.group_peers.get(g))
    return GROUP_LEAVE.entry(id=draw(st.sampled_from(live)) if live else "gone")


def replay_from(start: Replica, log: list[Entry]) -> list[Replica]:
    """The replica after every entry of ``log`` applied from ``start``."""
    replicas, replica = [], start
    for entry in log:
        replica = apply_entry(replica, entry).new
        replicas.append(replica)
    return replicas
