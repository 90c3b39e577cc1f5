"""Takeover: a failed peer's seat given to another peer without a new allocation version.

A job with local recovery on (peer.job.spec) logs enough for one of its function tasks to be
recovered alone: the replacement restores the task's last committed snapshot and replays what
its upstreams kept and its downstreams logged, while every other task goes on under the same
allocation version. That holds only while the logs cover the failure, so a job's failed peers
are taken over only when all of these hold, and otherwise the job rolls back as a whole, as it
always has:

- every failed peer ran a function task of engine python or arrow: inputs, outputs and Spark
  tasks recover by rolling back (inputs are never taken over, so neither is the coordinator,
  which runs with the first peer of the first input);
- the failed peers and those still recovering from an earlier takeover are no more than the
  job's ``causal_depth``, and no two of them run tasks adjacent in the workflow: a task's
  determinants live in its downstreams, which must have survived;
- every failed peer gets a replacement: its standby if that is still active and free, else a
  free active peer (fewest tags, then id) able to run its task; peers standing by for running
  peers are not taken. A failed peer's group is gone or exiting, so its other peers are not
  active: the replacement is of another group. (A lone virtual peer that left, its group
  staying, is the exception: its group is alive, and one of its peers may take over.)

The replacement takes the failed peer's place in the task's peers, and ``takeovers`` remembers
the seat's original peer, so the slot, and what routes to it, stays. Runs inside the
allocation step before the schedulers plan (peer.log.allocation), pure like it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set

from pyrsistent import PMap, PSet, pmap, pset

from peer.job.spec import Job
from peer.log.replica import Replica
from peer.scheduling.demand import PeerInfo


def take_over(replica: Replica, peers: Sequence[PeerInfo]) -> Replica:
    """``replica`` with the failed peers of every job that can recover locally replaced in
    their seats, its ``allocation_versions`` untouched; the very replica when none can.
    ``peers`` are those the schedulers may give work to."""
    local = [
        j for j in replica.job_order if j in replica.started and replica.jobs[j].local_recovery_on
    ]
    if not local:
        return replica
    active = {p.id: p for p in peers}
    failing = [j for j in local if _failed(replica, j, active)]
    if not failing:
        return replica
    allocated = {p for tasks in replica.allocations.values() for ps in tasks.values() for p in ps}
    for job_id in failing:
        replacements = _replacements(replica, job_id, active, allocated)
        if replacements:
            replica = _substituted(replica, job_id, replacements)
            allocated.update(replacements.values())
    return replica


def _failed(replica: Replica, job_id: str, active: Mapping[str, PeerInfo]) -> list[str]:
    """The allocated peers of the job that are no longer active."""
    seats = replica.allocations.get(job_id, pmap())
    return sorted(p for ps in seats.values() for p in ps if p not in active)


def _replacements(
    replica: Replica, job_id: str, active: Mapping[str, PeerInfo], allocated: Set[str]
) -> dict[str, str]:
    """Failed peer to its replacement, when the job can recover them all locally; else empty."""
    job = replica.jobs[job_id]
    task_of = {p: task for task, ps in replica.allocations[job_id].items() for p in ps}
    failed = _failed(replica, job_id, active)
    recovering = replica.recovering.get(job_id, pset())
    if len(failed) + len(recovering) > job.causal_depth:
        return {}
    if not all(job.task(task_of[p]).replayable for p in failed):
        return {}
    if _adjacent(job, {task_of[p] for p in (*failed, *recovering) if p in task_of}):
        return {}
    return _chosen(replica, job_id, {p: task_of[p] for p in failed}, active, allocated)


def _adjacent(job: Job, tasks: Set[str]) -> bool:
    """Whether any two of ``tasks`` are joined by a workflow edge."""
    return any(up in tasks and down in tasks for up, down in job.workflow)


def _chosen(
    replica: Replica,
    job_id: str,
    failed: Mapping[str, str],
    active: Mapping[str, PeerInfo],
    allocated: Set[str],
) -> dict[str, str]:
    job = replica.jobs[job_id]
    standbys = replica.standbys.get(job_id, pmap())
    guarding = {s for peers in replica.standbys.values() for r, s in peers.items() if r in active}
    free = sorted(
        (p for p in active.values() if p.id not in allocated and p.id not in guarding),
        key=lambda p: (len(p.tags), p.id),
    )
    chosen: dict[str, str] = {}
    for peer in failed:
        tags = frozenset(job.task(failed[peer]).required_tags)
        own = active.get(standbys.get(peer, ""))
        if own is not None and own.id not in allocated and tags <= own.tags:
            chosen[peer] = own.id
    for peer in failed:
        if peer in chosen:
            continue
        tags = frozenset(job.task(failed[peer]).required_tags)
        taken = set(chosen.values())
        pick = next((p.id for p in free if p.id not in taken and tags <= p.tags), None)
        if pick is None:
            return {}
        chosen[peer] = pick
    return chosen


def _substituted(replica: Replica, job_id: str, replacements: Mapping[str, str]) -> Replica:
    seats = replica.allocations[job_id]
    for task, peers in seats.items():
        if any(p in replacements for p in peers):
            seats = seats.set(task, tuple(replacements.get(p, p) for p in peers))
    takeovers: PMap = replica.takeovers.get(job_id, pmap())
    recovering: PSet = replica.recovering.get(job_id, pset())
    for failed, replacement in sorted(replacements.items()):
        takeovers = takeovers.discard(failed).set(replacement, takeovers.get(failed, failed))
        recovering = recovering.discard(failed).add(replacement)
    return replica.evolve(
        allocations=replica.allocations.set(job_id, seats),
        takeovers=replica.takeovers.set(job_id, takeovers),
        recovering=replica.recovering.set(job_id, recovering),
    )
