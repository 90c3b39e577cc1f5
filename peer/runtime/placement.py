"""Where a job's work sits under one allocation version: a pure value, built once per version.

Every group derives it from the same replica, so every group agrees on it: each task's peers in
slot order, the allocation's (a peer that took over a seat, peer.log.takeover, is put in the
place of the peer it replaced, so it has that peer's slot; a keyed task's peers that ran it
before are put in the slots that keep most of their key groups, peer.log.allocation), the peers
each task hears from and the tasks (with their peers) it sends to, the job's coordinator peer
(the first peer of its first input task), the short ids the wire knows the job and its peers by,
each peer's group, and the job's seats, standbys and takeovers. The task runners, their routers
and the job's coordinator all read it, instead of each working the topology out from the
allocation for itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field
from types import MappingProxyType

from pyrsistent import pmap

from peer.job.spec import Job
from peer.log.replica import Replica


@dataclass(frozen=True, slots=True)
class Downstream:
    """A task that another task sends to, and its peers, sorted."""

    task: str
    peers: tuple[str, ...]


@dataclass(frozen=True)
class Placement:
    job: Job
    job_id: str
    """The job's id, which a placed job has (submit-job gives it): ``job.id``, not None."""
    version: int
    """The allocation version: what the job's frames are stamped with."""
    peers: Mapping[str, tuple[str, ...]]
    """Each allocated task's peers, in slot order: the allocation's."""
    slots: Mapping[str, int]
    """Each peer's index among its task's peers."""
    tasks: Mapping[str, str]
    """Each peer's task."""
    upstream: Mapping[str, tuple[str, ...]]
    """Each task's upstream peers (the peers of its upstream tasks), sorted."""
    downstream: Mapping[str, tuple[Downstream, ...]]
    """Each task's downstream tasks, by name, with their peers."""
    coordinator: str | None
    """The peer whose group runs the job's coordinator; None while its first input has none."""
    short_ids: Mapping[str, int]
    """The short ids of the job and of its peers."""
    groups: Mapping[str, str]
    """Each peer's group."""
    standbys: Mapping[str, str]
    """Each running peer that has a standby, to it."""
    origin: Mapping[str, str]
    """Each peer to the peer first allocated to its seat (itself unless it took the seat over)."""
    recovering: frozenset[str]
    """The peers that took a seat over and are still replaying."""
    seats: Mapping[str, int]
    """Each peer's seat: the index of its (task, slot) among the job's, tasks sorted by name."""
    seat_peers: Mapping[int, str]
    """Each seat's current peer."""
    sources: tuple[object, object, object] = field(compare=False, repr=False, kw_only=True)
    """The replica's takeovers, standbys and recovering of the job this was built from: a
    placement is reused while they are the very same objects."""
    members: tuple[str, ...] = field(init=False)
    """Every peer of the job, sorted."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "members", tuple(sorted(self.tasks)))

    @property
    def job_short(self) -> int:
        return self.short_ids[self.job_id]

    def upstream_ids(self, task: str) -> frozenset[int]:
        """The short ids of the peers ``task`` hears from: what its inbox is keyed by."""
        return frozenset(self.short_ids[p] for p in self.upstream.get(task, ()))

    def peers_of_kind(self, kind: str) -> tuple[str, ...]:
        """Every peer of the tasks of this kind ("input", "function", "output"), sorted."""
        return tuple(sorted(p for p, t in self.tasks.items() if self.job.task(t).kind == kind))

    def task_slots(self) -> dict[str, int]:
        """How many peers each task has: what a commit records, so a restore knows how many
        snapshots each task left."""
        return {task: len(peers) for task, peers in sorted(self.peers.items())}

    def task_groups(self) -> dict[str, int]:
        """Each grouped task's number of key groups (or splits, for an input): what a commit
        records beside the slots, so a restore knows how the work was split among them."""
        job = self.job
        return {t: job.key_groups(t) for t in sorted(self.peers) if job.grouped(t)}


_EMPTY: Mapping[str, str] = pmap()
_NONE: frozenset[str] = frozenset()
"""What a job without takeovers, standbys or recovering peers is placed with: the same
objects every time, so that its placement is reused."""


def place(
    job: Job,
    version: int,
    allocation: Mapping[str, Sequence[str]],
    short_ids: Mapping[str, int],
    group_of: Mapping[str, str],
    *,
    takeovers: Mapping[str, str] = _EMPTY,
    standbys: Mapping[str, str] = _EMPTY,
    recovering: Set[str] = _NONE,
) -> Placement:
    """The placement of ``job`` under ``allocation``; ``short_ids`` and ``group_of`` may cover
    more than the job (the replica's), the placement keeps what is the job's. ``takeovers``,
    ``standbys`` and ``recovering`` are the job's entries of the replica's keys of that name.
    Only a submitted job, which has an id, is placed."""
    if job.id is None:
        raise ValueError("a job without an id cannot be placed: submit-job gives it one")
    peers = {task: tuple(ps) for task, ps in sorted(allocation.items())}
    tasks = {p: task for task, ps in peers.items() for p in ps}
    seat_peers = [p for ps in peers.values() for p in ps]
    parents: dict[str, set[str]] = {}
    children: dict[str, set[str]] = {}
    for parent, child in job.workflow:
        parents.setdefault(child, set()).add(parent)
        children.setdefault(parent, set()).add(child)
    first_input = next((t for t in job.sorted_tasks() if job.task(t).kind == "input"), None)
    leaders = peers.get(first_input, ()) if first_input is not None else ()
    known = [job.id, *tasks]
    return Placement(
        job=job,
        job_id=job.id,
        version=version,
        peers=MappingProxyType(peers),
        slots=MappingProxyType({p: ps.index(p) for ps in peers.values() for p in ps}),
        tasks=MappingProxyType(tasks),
        upstream=MappingProxyType(
            {
                task: tuple(sorted(p for up in ups for p in peers.get(up, ())))
                for task, ups in sorted(parents.items())
            }
        ),
        downstream=MappingProxyType(
            {
                task: tuple(Downstream(c, peers.get(c, ())) for c in sorted(downs))
                for task, downs in sorted(children.items())
            }
        ),
        coordinator=leaders[0] if leaders else None,
        short_ids=MappingProxyType({k: short_ids[k] for k in known if k in short_ids}),
        groups=MappingProxyType({p: group_of[p] for p in tasks if p in group_of}),
        standbys=standbys,
        origin=MappingProxyType({p: takeovers.get(p, p) for p in tasks}),
        recovering=frozenset(recovering),
        seats=MappingProxyType({p: seat for seat, p in enumerate(seat_peers)}),
        seat_peers=MappingProxyType(dict(enumerate(seat_peers))),
        sources=(takeovers, standbys, recovering),
    )


def placements(replica: Replica, previous: Mapping[str, Placement]) -> dict[str, Placement]:
    """The placement of every allocated job of ``replica``, reusing those of ``previous`` whose
    allocation version has not changed, nor the job's takeovers, standbys and recovering peers
    (the replica hands each on as the very same object while it is unchanged). A peer's short
    id and group are fixed while it is allocated: a new peer or a departed group means a new
    allocation, or a takeover."""
    out: dict[str, Placement] = {}
    group_of: dict[str, str] | None = None
    for job_id, allocation in sorted(replica.allocations.items()):
        version = replica.allocation_versions[job_id]
        sources = (
            replica.takeovers.get(job_id, _EMPTY),
            replica.standbys.get(job_id, _EMPTY),
            replica.recovering.get(job_id, _NONE),
        )
        kept = previous.get(job_id)
        if kept is not None and kept.version == version and _same(kept.sources, sources):
            out[job_id] = kept
            continue
        if group_of is None:
            group_of = {p: g for g, ps in replica.group_peers.items() for p in ps}
        job = replica.jobs[job_id]
        takeovers, standbys, recovering = sources
        out[job_id] = place(
            job, version, allocation, replica.short_ids, group_of,
            takeovers=takeovers, standbys=standbys, recovering=recovering,
        )  # fmt: skip
    return out


def _same(kept: tuple[object, ...], now: tuple[object, ...]) -> bool:
    return all(a is b for a, b in zip(kept, now, strict=True))
