"""What the schedulers take and give: peers, what each job asks for, and the allocation.

An Allocation is a read-only mapping (``types.MappingProxyType``) from every job id to a
read-only mapping from each of its task names, in topological order, to a sorted tuple of peer
ids. Every job given to ``allocate`` appears in it, with empty tuples when it got no peers, so
a consumer never has to tell a missing job from an idle one. Proxies compare equal to plain
dicts, so tests and callers may compare against literals.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

JOB_SCHEDULERS = ("greedy", "balanced", "percentage")
TASK_SCHEDULERS = ("balanced", "percentage", "colocated")

type Allocation = Mapping[str, Mapping[str, tuple[str, ...]]]


@dataclass(frozen=True, slots=True)
class PeerInfo:
    """A virtual peer, the peer group (one machine process) it lives in, and its tags."""

    id: str
    group: str
    tags: frozenset[str] = frozenset()

    def can_run(self, task: TaskDemand) -> bool:
        return task.required_tags <= self.tags


@dataclass(frozen=True, slots=True)
class TaskDemand:
    """One task of a job. ``percentage`` (0 to 100) only matters to the percentage task
    scheduler; ``max_peers`` None means unbounded."""

    name: str
    min_peers: int = 1
    max_peers: int | None = None
    required_tags: frozenset[str] = frozenset()
    percentage: float | None = None

    def __post_init__(self) -> None:
        if self.min_peers < 1:
            raise ValueError(f"task {self.name!r}: min_peers must be at least 1")
        if self.max_peers is not None and self.max_peers < self.min_peers:
            raise ValueError(f"task {self.name!r}: max_peers is below min_peers")
        if self.percentage is not None and not 0 <= self.percentage <= 100:
            raise ValueError(f"task {self.name!r}: percentage must be within 0..100")


@dataclass(frozen=True, slots=True)
class JobDemand:
    """A submitted job: its tasks in topological order, how its peers are split among them,
    and (for the percentage job scheduler) its share of the cluster, 0 to 100."""

    id: str
    tasks: tuple[TaskDemand, ...]
    task_scheduler: str = "balanced"
    percentage: float | None = None

    def __post_init__(self) -> None:
        if self.task_scheduler not in TASK_SCHEDULERS:
            raise ValueError(f"job {self.id!r}: unknown task scheduler {self.task_scheduler!r}")
        names = [t.name for t in self.tasks]
        if len(names) != len(set(names)):
            raise ValueError(f"job {self.id!r}: task names repeat")
        if self.percentage is not None and not 0 <= self.percentage <= 100:
            raise ValueError(f"job {self.id!r}: percentage must be within 0..100")

    @property
    def minimum(self) -> int:
        """Peers the job needs before it may run at all. Each peer runs one task, so the
        minimums add up; a colocated job needs its largest minimum on every task, since each
        peer group it uses gives every task one peer."""
        if not self.tasks:
            return 0
        if self.task_scheduler == "colocated":
            return len(self.tasks) * max(t.min_peers for t in self.tasks)
        return sum(t.min_peers for t in self.tasks)


def freeze(plan: Mapping[str, Mapping[str, list[str] | tuple[str, ...]]]) -> Allocation:
    """An Allocation from plain nested mappings, peer ids sorted."""
    return MappingProxyType(
        {
            job: MappingProxyType({task: tuple(sorted(ps)) for task, ps in tasks.items()})
            for job, tasks in plan.items()
        }
    )
