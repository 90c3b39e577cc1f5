"""Task schedulers, count side: how many of a job's peers each of its tasks gets.

Which peers those are is decided afterwards (peer.scheduling.assign), so the counts depend only
on the job and the present peers, never on the previous allocation: that is what lets a job
untouched by a change keep exactly its peers.
"""

from __future__ import annotations

from peer.scheduling.capacity import Cluster
from peer.scheduling.demand import JobDemand
from peer.scheduling.spread import spread


def task_counts(job: JobDemand, peers: int, cluster: Cluster) -> list[int]:
    """Split ``peers`` (at least the job's minimum) among the job's tasks in topological
    order. A colocated job counts in whole pipelines: its tasks all get ``peers // tasks``,
    and the rest of its share is not used."""
    if not peers or not job.tasks:
        return [0] * len(job.tasks)
    caps = [cluster.task_cap(t) for t in job.tasks]
    if job.task_scheduler == "colocated":
        return [min([peers // len(job.tasks), *caps])] * len(job.tasks)
    weights = [1.0] * len(job.tasks)
    if job.task_scheduler == "percentage" and any(t.percentage for t in job.tasks):
        weights = [t.percentage or 0.0 for t in job.tasks]
    floors = [t.min_peers for t in job.tasks]
    extra = spread(peers - sum(floors), weights, [c - f for c, f in zip(caps, floors, strict=True)])
    return [f + e for f, e in zip(floors, extra, strict=True)]
