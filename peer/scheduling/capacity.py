"""What the present peers allow each job, before any job competes for them: how many peers
can run each task (tags), which peer groups can host a whole colocated pipeline, and from
those, every job's minimum and saturation."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Sequence, Set
from dataclasses import dataclass, field

from peer.scheduling.demand import JobDemand, PeerInfo, TaskDemand


@dataclass(frozen=True, slots=True)
class Cluster:
    """The peers, indexed once per allocation: sorted by id, by group, and the number of
    peers carrying each distinct set of tags (there are few such sets, so tag questions cost
    in proportion to them rather than to the peers)."""

    peers: tuple[PeerInfo, ...]
    by_id: dict[str, PeerInfo]
    groups: dict[str, tuple[PeerInfo, ...]]
    signatures: tuple[tuple[frozenset[str], int], ...]
    pipelines: dict[str, int] = field(default_factory=dict)  # memo of pipeline_groups

    @classmethod
    def of(cls, peers: Sequence[PeerInfo]) -> Cluster:
        ordered = tuple(sorted(peers, key=lambda p: p.id))
        by_id = {p.id: p for p in ordered}
        if len(by_id) != len(ordered):
            raise ValueError("peer ids repeat")
        groups: dict[str, list[PeerInfo]] = defaultdict(list)
        for p in ordered:
            groups[p.group].append(p)
        counts = Counter(p.tags for p in ordered)
        return cls(
            peers=ordered,
            by_id=by_id,
            groups={g: tuple(sorted(ps, key=preference)) for g, ps in sorted(groups.items())},
            signatures=tuple(sorted(counts.items(), key=lambda kv: signature_order(kv[0]))),
        )

    def eligible(self, task: TaskDemand) -> int:
        return sum(n for tags, n in self.signatures if task.required_tags <= tags)

    def usable(self, job: JobDemand) -> int:
        """The peers able to run at least one of the job's tasks: all the job can ever hold,
        as one peer runs one task."""
        tasks = job.tasks
        return sum(n for tags, n in self.signatures if any(t.required_tags <= tags for t in tasks))

    def task_cap(self, task: TaskDemand) -> int:
        """At most max_peers, and never more than the peers able to run the task."""
        room = self.eligible(task)
        return room if task.max_peers is None else min(task.max_peers, room)

    def pipeline_groups(self, job: JobDemand) -> int:
        """Peer groups that on their own can give every task of the job one peer."""
        if job.id not in self.pipelines:
            found = (pipeline(members, job.tasks, _always) for members in self.groups.values())
            self.pipelines[job.id] = sum(1 for chosen in found if chosen is not None)
        return self.pipelines[job.id]

    def feasible(self, job: JobDemand) -> bool:
        """Whether the job could reach its minimum with every peer to itself."""
        if not job.tasks:
            return False
        if job.task_scheduler == "colocated":
            return self.pipeline_groups(job) >= max(t.min_peers for t in job.tasks)
        return all(self.eligible(t) >= t.min_peers for t in job.tasks) and (
            self.usable(job) >= job.minimum
        )

    def saturation(self, job: JobDemand) -> int:
        """The most peers the job can use; with no max_peers this is bounded only by the
        peers able to run its tasks: each task's, and all its tasks' together (a job whose
        tasks all need a tag gets no share of the untagged peers, which it could not place)."""
        caps = [self.task_cap(t) for t in job.tasks]
        if job.task_scheduler == "colocated":
            return len(job.tasks) * min([*caps, self.pipeline_groups(job)])
        if job.task_scheduler == "percentage" and any(_weight(t) for t in job.tasks):
            wanted = sum(
                c if _weight(t) else t.min_peers for t, c in zip(job.tasks, caps, strict=True)
            )
            return min(wanted, self.usable(job))
        return min(sum(caps), self.usable(job))


def _always(_: str) -> bool:
    return True


def _weight(task: TaskDemand) -> float:
    return task.percentage or 0.0


def signature_order(tags: frozenset[str]) -> tuple[int, tuple[str, ...]]:
    """Peers with fewer tags are handed out first, keeping the tagged ones for the tasks that
    need them."""
    return (len(tags), tuple(sorted(tags)))


def preference(peer: PeerInfo) -> tuple[int, tuple[str, ...], str]:
    return (*signature_order(peer.tags), peer.id)


def constrained_first(tasks: Sequence[TaskDemand]) -> list[int]:
    """Task positions, those requiring more tags first, then in topological order."""
    return sorted(range(len(tasks)), key=lambda i: (-len(tasks[i].required_tags), i))


def pipeline(
    members: Sequence[PeerInfo],
    tasks: Sequence[TaskDemand],
    free: Callable[[str], bool],
    have: Set[int] = frozenset(),
) -> dict[int, PeerInfo] | None:
    """One free peer of a group for every task position not in ``have`` (position to peer),
    or None when some task cannot be given one."""
    chosen: dict[int, PeerInfo] = {}
    used: set[str] = set()
    for i in constrained_first(tasks):
        if i in have:
            continue
        peer = next(
            (p for p in members if p.id not in used and free(p.id) and p.can_run(tasks[i])), None
        )
        if peer is None:
            return None
        chosen[i] = peer
        used.add(peer.id)
    return chosen
