"""What a scheduler needs to know, as one value that can cross the network, and the answer.

A scheduling request holds exactly what ``allocate`` reads of a replica: the job scheduler, the
jobs' demands in submission order and which of them have started, the active peers with their
groups and tags, and the previous allocations. A member can send it to a scheduling server, or
call ``schedule`` on it itself when no answer comes in time: both give the same allocation, so
replicas agree whoever computed it.

The JSON form is canonical (sets and peers sorted, numbers normalised) so that equal requests
give equal documents and equal digests, which is what a server caches its answers under. Every
document that comes in is checked, and a bad one is refused with the path of the field at fault:
a member and a server of different versions must not silently disagree on what was asked.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Any

import msgspec

from peer.scheduling.allocate import allocate
from peer.scheduling.demand import JOB_SCHEDULERS, Allocation, JobDemand, PeerInfo, TaskDemand

FORMAT = 1
"""The version of the JSON form; a document of another version is refused, not guessed at."""

type Previous = tuple[tuple[str, tuple[tuple[str, tuple[str, ...]], ...]], ...]
"""Previous allocations as sorted tuples: job id, then (task name, sorted peer ids)."""


@dataclass(frozen=True, slots=True)
class SchedulingRequest:
    """The scheduling subset of a replica. ``peers`` are kept sorted by id and ``previous``
    sorted throughout, since neither order matters to the schedulers: requests that schedule
    alike compare equal."""

    job_scheduler: str
    jobs: tuple[JobDemand, ...]
    started: frozenset[str]
    peers: tuple[PeerInfo, ...]
    previous: Previous = ()

    def __post_init__(self) -> None:
        if self.job_scheduler not in JOB_SCHEDULERS:
            raise ValueError(f"job_scheduler: unknown job scheduler {self.job_scheduler!r}")
        ids = [job.id for job in self.jobs]
        if len(ids) != len(set(ids)):
            raise ValueError(f"jobs: job ids repeat: {sorted(ids)}")
        if not self.started <= set(ids):
            raise ValueError(f"started: names jobs not in jobs: {sorted(self.started - set(ids))}")
        peers = tuple(sorted(self.peers, key=lambda p: p.id))
        if len({p.id for p in peers}) != len(peers):
            raise ValueError("peers: peer ids repeat")
        object.__setattr__(self, "peers", peers)
        object.__setattr__(self, "previous", _sorted_previous(self.previous))

    def previous_allocation(self) -> Allocation:
        return MappingProxyType(
            {job: MappingProxyType(dict(tasks)) for job, tasks in self.previous}
        )

    def to_json(self) -> dict[str, Any]:
        """The canonical, JSON-ready document; ``from_json`` reads it back to an equal value."""
        return {
            "format": FORMAT,
            "job_scheduler": self.job_scheduler,
            "jobs": [_job_json(job) for job in self.jobs],
            "started": sorted(self.started),
            "peers": [{"id": p.id, "group": p.group, "tags": sorted(p.tags)} for p in self.peers],
            "previous": {job: {t: list(ps) for t, ps in tasks} for job, tasks in self.previous},
        }

    @classmethod
    def from_json(cls, doc: Any) -> SchedulingRequest:
        """The request a document describes; ValueError naming the field when it is not one."""
        try:
            wire = msgspec.convert(doc, _Wire)
        except msgspec.ValidationError as e:
            raise ValueError(f"scheduling request: {e}") from None
        if wire.format != FORMAT:
            raise ValueError(f"scheduling request: format {wire.format}, expected {FORMAT}")
        _refuse_unknown_keys(doc)
        try:
            previous = _peers_by_task(wire.previous, "$.previous")
            return cls(
                job_scheduler=wire.job_scheduler,
                jobs=wire.jobs,
                started=wire.started,
                peers=wire.peers,
                previous=tuple((j, tuple(ts.items())) for j, ts in previous.items()),
            )
        except ValueError as e:
            raise ValueError(f"scheduling request: {e}") from None

    def digest(self) -> str:
        """sha256 of the canonical document, hex: equal requests, equal digests."""
        return digest_of(self.to_json())


def canonical_text(doc: Any) -> bytes:
    """A JSON document as digests read it: keys sorted, no spaces. A request's canonical
    document in this form is what a member sends, so a server can find the answer it keeps
    for it from the text alone."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def digest_of(doc: Any) -> str:
    """sha256 of ``canonical_text(doc)``, hex: a request's digest when ``doc`` is its JSON."""
    return hashlib.sha256(canonical_text(doc)).hexdigest()


def schedule(request: SchedulingRequest) -> Allocation:
    """The allocation the request asks for: the one function both the log and a scheduling
    server compute it with."""
    return allocate(
        request.job_scheduler, request.jobs, request.peers, request.previous_allocation()
    )


type Planner = Callable[[SchedulingRequest, int], Allocation]
"""Who computes the allocation a request at a log position asks for: ``plan_here`` does it in
this process; a client of scheduling servers asks them and falls back to ``schedule`` itself,
so every planner answers alike."""


def plan_here(request: SchedulingRequest, position: int) -> Allocation:
    """The planner that computes every allocation in this process."""
    return schedule(request)


def allocation_to_json(allocation: Allocation) -> dict[str, dict[str, list[str]]]:
    """An allocation as plain JSON-ready data, jobs and tasks in their order."""
    return {
        job: {task: list(ps) for task, ps in tasks.items()} for job, tasks in allocation.items()
    }


def allocation_from_json(doc: Any, request: SchedulingRequest) -> Allocation:
    """The answer to ``request`` a document describes, or ValueError naming what is wrong.

    It must give every job of the request exactly its tasks, and only the request's peers,
    each to one task at most: an answer that could not have come from ``schedule`` is refused
    rather than recorded in the log.
    """
    try:
        plain = _peers_by_task(doc, "$")
    except ValueError as e:
        raise ValueError(f"allocation: {e}") from None
    if set(plain) != {job.id for job in request.jobs}:
        raise ValueError(f"allocation: jobs {sorted(plain)} are not the request's")
    known, seen = {p.id for p in request.peers}, set()
    for job in request.jobs:
        names = [t.name for t in job.tasks]
        if set(plain[job.id]) != set(names):
            raise ValueError(f"allocation: job {job.id!r} has tasks {sorted(plain[job.id])}")
        for task in names:
            for peer in plain[job.id][task]:
                if peer not in known or peer in seen:
                    where = f"{job.id!r} task {task!r}"
                    raise ValueError(f"allocation: peer {peer!r} of {where} is unknown or twice")
                seen.add(peer)
    return MappingProxyType(
        {
            job.id: MappingProxyType(
                {t.name: tuple(sorted(plain[job.id][t.name])) for t in job.tasks}
            )
            for job in request.jobs
        }
    )


def _peers_by_task(doc: Any, path: str) -> dict[str, dict[str, tuple[str, ...]]]:
    """An allocation-shaped document, job to task to peer ids, checked at every level so
    that a bad one is refused with the job and task it is under."""
    if not isinstance(doc, Mapping):
        raise ValueError(f"expected an object of jobs - at `{path}`")
    plain: dict[str, dict[str, tuple[str, ...]]] = {}
    for job, tasks in doc.items():
        if not isinstance(job, str) or not isinstance(tasks, Mapping):
            raise ValueError(f"expected an object of tasks - at `{path}[{job!r}]`")
        plain[job] = {}
        for task, peers in tasks.items():
            where = f"{path}[{job!r}][{task!r}]"
            if not isinstance(task, str) or not isinstance(peers, list | tuple):
                raise ValueError(f"expected an array of peer ids - at `{where}`")
            if not all(isinstance(p, str) for p in peers):
                raise ValueError(f"expected peer ids to be strings - at `{where}`")
            plain[job][task] = tuple(peers)
    return plain


class _Wire(msgspec.Struct, forbid_unknown_fields=True):
    format: int
    job_scheduler: str
    jobs: tuple[JobDemand, ...]
    started: frozenset[str]
    peers: tuple[PeerInfo, ...]
    previous: Any


def _job_json(job: JobDemand) -> dict[str, Any]:
    return {
        "id": job.id,
        "tasks": [
            {
                "name": t.name,
                "min_peers": t.min_peers,
                "max_peers": t.max_peers,
                "required_tags": sorted(t.required_tags),
                "percentage": _number(t.percentage),
            }
            for t in job.tasks
        ],
        "task_scheduler": job.task_scheduler,
        "percentage": _number(job.percentage),
    }


def _number(value: float | None) -> float | None:
    """A percentage as a float, so that 50 and 50.0 (and -0.0 and 0.0), equal to the
    schedulers, encode alike."""
    return None if value is None else float(value) + 0.0


def _sorted_previous(previous: Previous) -> Previous:
    return tuple(
        sorted(
            (job, tuple(sorted((t, tuple(sorted(ps))) for t, ps in tasks)))
            for job, tasks in previous
        )
    )


_KNOWN = {
    "job": {f.name for f in fields(JobDemand)},
    "task": {f.name for f in fields(TaskDemand)},
    "peer": {f.name for f in fields(PeerInfo)},
}


def _refuse_unknown_keys(doc: Mapping[str, Any]) -> None:
    """Keys the decoder would drop: a field this version does not know changes the answer it
    would give, so the document is refused. Runs after decoding, so the shape is sound."""
    for j, job in enumerate(doc["jobs"]):
        _known(job, "job", f"$.jobs[{j}]")
        for t, task in enumerate(job["tasks"]):
            _known(task, "task", f"$.jobs[{j}].tasks[{t}]")
    for p, peer in enumerate(doc["peers"]):
        _known(peer, "peer", f"$.peers[{p}]")


def _known(item: Mapping[str, Any], kind: str, path: str) -> None:
    unknown = sorted(set(item) - _KNOWN[kind])
    if unknown:
        raise ValueError(f"scheduling request: unknown {kind} fields {unknown} - at `{path}`")
