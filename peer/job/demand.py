"""What a job asks of the schedulers, read off its catalog.

The flux policy ``continue`` lets a task that has started go on with fewer peers than its
minimum, down to one, so for a started job it lowers the minimum the schedulers hold it to;
``kill`` and ``recover`` keep the minimum, and the log decides what happens to a started job
that falls below it. A keyed task never asks for more peers than it has key groups, nor an input
whose share is split (peer.job.spec.Job.grouped) for more than it has splits.
"""

from __future__ import annotations

from peer.job.spec import Job, Task
from peer.scheduling import JobDemand, TaskDemand


def job_demand(job: Job, *, started: bool = False) -> JobDemand:
    assert job.id is not None, "only submitted jobs, which have ids, are scheduled"
    return JobDemand(
        id=job.id,
        tasks=tuple(_task_demand(job, job.task(name), started) for name in job.sorted_tasks()),
        task_scheduler=job.task_scheduler,
        percentage=job.percentage,
    )


def _task_demand(job: Job, task: Task, started: bool) -> TaskDemand:
    relaxed = started and task.flux_policy == "continue"
    most = task.max_peers
    if job.grouped(task.name):
        groups = job.key_groups(task.name)
        most = groups if most is None else min(most, groups)
    return TaskDemand(
        name=task.name,
        min_peers=1 if relaxed else task.min_peers,
        max_peers=most,
        required_tags=frozenset(task.required_tags),
        percentage=task.percentage,
    )
