"""Task schedulers, peer side: which peers fill the counts the schedulers decided.

Stability comes first. Every task keeps, up to its new count, the peers it had in the previous
allocation that are still present and can still run it (lowest ids first when it shrinks);
only then are the empty places filled from free peers. A peer is on one task at most, and a
previous peer is claimed back only by its own previous task, so a task whose count did not
drop keeps every previous peer still present, whatever happened to the other jobs.

Filling goes from the most constrained to the least: colocated jobs (whole pipelines per
peer group) first, then tasks requiring tags, then the rest, each in submission and then
topological order. Free peers are handed out with the fewest tags first, then by id, so
untagged work does not use up the tagged peers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from peer.scheduling.capacity import Cluster, constrained_first, pipeline, signature_order
from peer.scheduling.demand import Allocation, JobDemand, PeerInfo, TaskDemand


@dataclass(slots=True)
class Assignment:
    """The assignment under construction: who owns each claimed peer, and each task's peers
    (job position, task position)."""

    cluster: Cluster
    owner: dict[str, tuple[int, int]] = field(default_factory=dict)
    tasks: dict[tuple[int, int], list[str]] = field(default_factory=dict)

    def claim(self, peer: str, job: int, task: int) -> None:
        self.owner[peer] = (job, task)
        self.tasks.setdefault((job, task), []).append(peer)

    def release(self, peer: str) -> None:
        self.tasks[self.owner.pop(peer)].remove(peer)

    def free(self, peer: str) -> bool:
        return peer not in self.owner and peer in self.cluster.by_id


def place(
    jobs: Sequence[JobDemand],
    counts: Sequence[Sequence[int]],
    cluster: Cluster,
    previous: Allocation | None,
) -> tuple[Assignment, list[int]]:
    """Peers for every task, and the positions of the jobs that fell below their minimum
    because other jobs took the peers their tags or groups needed."""
    assignment = Assignment(cluster)
    kept_groups = {
        j: _keep(assignment, j, job, counts[j], (previous or {}).get(job.id, {}))
        for j, job in enumerate(jobs)
        if any(counts[j])
    }
    short = []
    for j, job in enumerate(jobs):
        if job.task_scheduler == "colocated" and any(counts[j]):
            formed = _colocate(assignment, j, job, counts[j][0], kept_groups[j])
            if formed < max(t.min_peers for t in job.tasks):
                short.append(j)
    _fill(assignment, jobs, counts)
    for j, job in enumerate(jobs):
        if job.task_scheduler != "colocated" and any(counts[j]):
            sizes = [len(assignment.tasks.get((j, i), ())) for i in range(len(job.tasks))]
            if any(n < t.min_peers for n, t in zip(sizes, job.tasks, strict=True)):
                short.append(j)
    return assignment, sorted(short)


def _keep(
    assignment: Assignment,
    j: int,
    job: JobDemand,
    counts: Sequence[int],
    previous: Mapping[str, Sequence[str]],
) -> list[str]:
    """Claim back previous peers; for a colocated job, return the groups it keeps."""
    cluster = assignment.cluster
    still = [
        [
            p
            for p in sorted(previous.get(task.name, ()))
            if assignment.free(p) and cluster.by_id[p].can_run(task)
        ]
        for task in job.tasks
    ]
    if job.task_scheduler != "colocated":
        for i, peers in enumerate(still):
            for p in peers[: counts[i]]:
                assignment.claim(p, j, i)
        return []
    by_group: dict[str, dict[int, str]] = {}
    for i, peers in enumerate(still):
        for p in peers:
            by_group.setdefault(cluster.by_id[p].group, {}).setdefault(i, p)
    groups = sorted(by_group)[: counts[0] if counts else 0]
    for g in groups:
        for i, p in sorted(by_group[g].items()):
            assignment.claim(p, j, i)
    return groups


def _colocate(assignment: Assignment, j: int, job: JobDemand, wanted: int, kept: list[str]) -> int:
    """Complete the kept groups' pipelines (a group that can no longer host the whole
    pipeline is let go), then add whole new ones in group order; returns the pipelines."""
    cluster, formed = assignment.cluster, 0
    for g in kept:
        have = {
            assignment.owner[p.id][1]: p.id
            for p in cluster.groups[g]
            if assignment.owner.get(p.id, (None,))[0] == j
        }
        chosen = pipeline(cluster.groups[g], job.tasks, assignment.free, set(have))
        if chosen is None:
            for p in sorted(have.values()):
                assignment.release(p)
            continue
        _claim_all(assignment, j, chosen)
        formed += 1
    for g, members in cluster.groups.items():
        if formed >= wanted:
            break
        if g not in kept:
            chosen = pipeline(members, job.tasks, assignment.free)
            if chosen is not None:
                _claim_all(assignment, j, chosen)
                formed += 1
    return formed


def _claim_all(assignment: Assignment, j: int, chosen: Mapping[int, PeerInfo]) -> None:
    for i, p in sorted(chosen.items()):
        assignment.claim(p.id, j, i)


def _fill(
    assignment: Assignment, jobs: Sequence[JobDemand], counts: Sequence[Sequence[int]]
) -> None:
    pool = _Pool(assignment)
    order = sorted(
        (not job.tasks[i].required_tags, j, rank, i)
        for j, job in enumerate(jobs)
        if job.task_scheduler != "colocated"
        for rank, i in enumerate(constrained_first(job.tasks))
    )
    for _, j, _, i in order:
        missing = counts[j][i] - len(assignment.tasks.get((j, i), ()))
        if missing > 0:
            for p in pool.take(jobs[j].tasks[i], missing):
                assignment.claim(p, j, i)


class _Pool:
    """Free peers by distinct tag set, each list sorted by id with a cursor past the claimed
    ones: handing out n peers costs n plus the tag sets looked at, not the whole cluster."""

    def __init__(self, assignment: Assignment) -> None:
        self._placement = assignment
        buckets: dict[frozenset[str], list[str]] = {}
        for p in assignment.cluster.peers:
            buckets.setdefault(p.tags, []).append(p.id)
        self._buckets = sorted(buckets.items(), key=lambda kv: signature_order(kv[0]))
        self._cursor = [0] * len(self._buckets)

    def take(self, task: TaskDemand, n: int) -> list[str]:
        taken: list[str] = []
        for b, (tags, ids) in enumerate(self._buckets):
            if not task.required_tags <= tags:
                continue
            cursor = self._cursor[b]
            while cursor < len(ids) and len(taken) < n:
                if self._placement.free(ids[cursor]):
                    taken.append(ids[cursor])
                cursor += 1
            self._cursor[b] = cursor
            if len(taken) == n:
                break
        return taken
