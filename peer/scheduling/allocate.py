"""The entry points: the whole allocation of peers to jobs and tasks, and who is waiting.

``allocate`` first fixes counts (the job scheduler over jobs, then each job's task scheduler
over its tasks), then chooses the peers (peer.scheduling.assign). When competition for tagged
peers or for whole peer groups leaves a job below its minimum, that job is set at zero and
everything is decided again without it, so the result never holds a job below its minimum.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType

from peer.scheduling.assign import place
from peer.scheduling.capacity import Cluster
from peer.scheduling.demand import JOB_SCHEDULERS, Allocation, JobDemand, PeerInfo
from peer.scheduling.jobs import SCHEDULERS, Need
from peer.scheduling.tasks import task_counts


def allocate(
    job_scheduler: str,
    jobs: Sequence[JobDemand],
    peers: Sequence[PeerInfo],
    previous: Allocation | None = None,
) -> Allocation:
    """Every job (in submission order) mapped to its tasks' sorted peer ids.

    Pure: the same arguments give the same allocation, whatever the order of ``peers``.
    ``previous`` only decides which peers fill the counts, never the counts themselves, so
    supplying it never changes how many peers a task gets. Peers it names that are gone, or
    jobs and tasks it names that no longer exist, are ignored.
    """
    if job_scheduler not in JOB_SCHEDULERS:
        raise ValueError(f"unknown job scheduler {job_scheduler!r}")
    if len({job.id for job in jobs}) != len(jobs):
        raise ValueError("job ids repeat")
    cluster = Cluster.of(peers)
    static = [_static_need(job, cluster) for job in jobs]
    out: set[int] = set()
    while True:
        needs = [Need(n.minimum, 0, n.percentage) if j in out else n for j, n in enumerate(static)]
        quotas = SCHEDULERS[job_scheduler](needs, len(cluster.peers))
        counts = [task_counts(job, q, cluster) for job, q in zip(jobs, quotas, strict=True)]
        placement, short = place(jobs, counts, cluster, previous)
        if not short:
            break
        out.update(short)
    return MappingProxyType(
        {
            job.id: MappingProxyType(
                {
                    task.name: tuple(sorted(placement.tasks.get((j, i), ())))
                    for i, task in enumerate(job.tasks)
                }
            )
            for j, job in enumerate(jobs)
        }
    )


def _static_need(job: JobDemand, cluster: Cluster) -> Need:
    """A job that could not reach its minimum even with every peer to itself is given a
    saturation of zero, which no scheduler lets it start with."""
    saturation = cluster.saturation(job) if cluster.feasible(job) else 0
    return Need(job.minimum, saturation, job.percentage)


def waiting(
    jobs: Sequence[JobDemand], peers: Sequence[PeerInfo], allocation: Allocation
) -> dict[str, int]:
    """Jobs holding no present peer, with the peers each needs before it can start.

    The need is the job's minimum (JobDemand.minimum): the sum of its tasks' min_peers, since
    a peer runs one task whatever tags it has; for a colocated job, its largest minimum on
    every task. Peers of ``allocation`` absent from ``peers`` do not count, so a job whose
    peers all left is reported even before the allocation is recomputed.
    """
    present = {p.id for p in peers}
    waiting_jobs = {}
    for job in jobs:
        held = allocation.get(job.id, {}).values()
        if job.minimum and not any(p in present for ps in held for p in ps):
            waiting_jobs[job.id] = job.minimum
    return waiting_jobs
