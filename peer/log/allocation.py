"""Who works on what, recomputed inside the log whenever peers or jobs change.

It runs after every entry, as part of applying it, so allocation is a pure function of the
replica like everything else: an entry that changes neither the active peers nor the jobs costs
a few identity checks. The peers of an exiting member are not active: it has handed its work
over. A job whose allocation changes gets the entry's position as its new allocation version,
which is what the data plane stamps on its messages and what tells stale messages and stale
complete-job entries from current ones.

Flux policies: a started job that the schedulers leave without peers is killed when any of its
tasks says ``kill``, and otherwise waits for peers (``recover``; ``continue`` already lowered its
minimum in peer.job.demand).

Local recovery: before the schedulers plan, the failed peers of a job that can recover them
locally are replaced in their seats (peer.log.takeover), and the plan, which keeps every
present peer where the counts allow, then leaves the job as it is: its version stays. After
the plan, every running peer of a task that keeps a standby is given one
(peer.scheduling.standby).

Growth at a pause: a running job with checkpoints that the plan would give more peers is
planned again at its present size (its tasks' maximums lowered to their counts), and kept in
``held_back``. Growing it here would start its new allocation from its last commit and redo
what followed; instead its coordinator pauses it, and once it stands still at a commit writes
grow-job, which puts it in ``growing``: the next plan lets it grow, and its new allocation
restores from that commit with nothing to redo. The plan held back is a fixpoint: peers a held
job leaves free can make another job grow, and that one is held back too.

The schedulers see only ``scheduling_request(replica)`` (lowered maximums included), and the
allocation is ``schedule`` of it, whichever planner runs it: a scheduling server given that
request computes the very same allocation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from pyrsistent import PMap, pmap, pset

from peer.job.demand import job_demand
from peer.job.spec import Job
from peer.log.entries.jobs import LOCAL_RECOVERY, finish
from peer.log.replica import Replica
from peer.log.takeover import take_over
from peer.scheduling import Allocation, JobDemand, PeerInfo
from peer.scheduling.request import Planner, SchedulingRequest, plan_here
from peer.scheduling.standby import StandbyNeed, choose_standbys
from peer.state.key_groups import heir

TRIGGERS = frozenset({"jobs", "groups", "exiting", "group_peers", "group_tags", "growing"})
"""The keys whose change has the allocation recomputed: the jobs, the active peers, and the
jobs let grow."""

RECORD_WRITES = (
    frozenset({"allocations", "allocation_versions", "started", "done", "held_back", "growing"})
    | LOCAL_RECOVERY
)
"""What recording an allocation writes, takeovers and standbys included."""

KILL_WRITES = frozenset({"jobs", "job_order", "finished", "reasons", "short_ids"}) | LOCAL_RECOVERY
"""What a flux policy's kill writes besides: the killed job leaves (peer.log.entries.jobs)."""

ALLOCATION_READS = TRIGGERS | RECORD_WRITES | KILL_WRITES | frozenset({"job_scheduler"})
"""Every key computing an allocation reads, flux kills included."""

ALLOCATION_WRITES = RECORD_WRITES | KILL_WRITES
"""Every key an allocation may write."""


def reallocate(old: Replica, new: Replica, position: int, planner: Planner = plan_here) -> Replica:
    """``new`` with its allocations brought up to date at ``position``, if the entry that took
    ``old`` to ``new`` asks for it; ``planner`` computes them (peer.scheduling.request)."""
    if not needs_allocation(old, new):
        return new
    return allocate(new, position, planner)


def allocate(replica: Replica, position: int, planner: Planner = plan_here) -> Replica:
    """The expensive step on its own: ``replica`` with its allocations recomputed at
    ``position``, killing the started jobs left without peers whose flux policy says so. A
    replica without jobs is returned as it is, holding no job back."""
    if not replica.jobs:
        return _holding(replica, frozenset())
    active = active_peers(replica)
    replica = take_over(replica, active)
    plan, held = _plan(replica, active, planner, position)
    doomed = [
        j
        for j in replica.job_order
        if j in replica.started
        and not any(plan[j].values())
        and any(t.flux_policy == "kill" for t in replica.jobs[j].catalog)
    ]
    for job in doomed:
        replica = finish(replica, job, "killed", _flux_reason(replica, job))
    if doomed:
        plan, held = _plan(replica, active, planner, position)
    return with_standbys(_holding(_record(replica, plan, position), held), active)


def _plan(
    replica: Replica, active: tuple[PeerInfo, ...], planner: Planner, position: int
) -> tuple[Allocation, frozenset[str]]:
    """The schedulers' plan, with every job it would grow at once held back at its size
    (planned again until none more would grow), and those jobs."""
    request = scheduling_request(replica, active)
    plan, held = planner(request, position), frozenset[str]()
    while more := _would_grow(replica, plan) - held:
        held |= more
        plan = planner(_capped(request, replica, held), position)
    return plan, held


def _would_grow(replica: Replica, plan: Allocation) -> frozenset[str]:
    """The running jobs with checkpoints, not let grow, that ``plan`` gives more peers in some
    task than they have."""
    return frozenset(
        j
        for j in replica.job_order
        if j in replica.started
        and j not in replica.growing
        and replica.jobs[j].barrier_period is not None
        and _grows(replica.allocations.get(j), plan[j])
    )


def _grows(
    seats: Mapping[str, tuple[str, ...]] | None, tasks: Mapping[str, tuple[str, ...]]
) -> bool:
    """Whether a job running on ``seats`` (every task with peers) gains peers in ``tasks``."""
    if not seats or not all(seats.values()):
        return False
    return any(len(peers) > len(seats.get(task, ())) for task, peers in tasks.items())


def _capped(
    request: SchedulingRequest, replica: Replica, held: frozenset[str]
) -> SchedulingRequest:
    """``request`` with the tasks of the ``held`` jobs asking for no more peers than they have."""
    return replace(
        request,
        jobs=tuple(
            _capped_job(job, replica.allocations[job.id]) if job.id in held else job
            for job in request.jobs
        ),
    )


def _capped_job(job: JobDemand, seats: Mapping[str, tuple[str, ...]]) -> JobDemand:
    tasks = []
    for task in job.tasks:
        size = len(seats[task.name])
        tasks.append(replace(task, min_peers=min(task.min_peers, size), max_peers=size))
    return replace(job, tasks=tuple(tasks))


def _holding(replica: Replica, held: frozenset[str]) -> Replica:
    """``replica`` with ``held`` as the jobs held back, and none let grow any longer (the same
    objects when nothing changes)."""
    changes = {}
    # As frozensets: a PSet equals a frozenset of the same items, which its type does not say.
    if held != frozenset(replica.held_back):
        changes["held_back"] = pset(held)
    if replica.growing:
        changes["growing"] = pset()
    return replica.evolve(**changes) if changes else replica


def allocation_writes(replica: Replica) -> frozenset[str]:
    """The keys allocating ``replica`` may write: a flux kill's too only when some started
    job has a task whose flux policy is kill, since only such a job can be killed."""
    killable = any(
        t.flux_policy == "kill" for j in replica.started if j in replica.jobs
        for t in replica.jobs[j].catalog
    )  # fmt: skip
    return ALLOCATION_WRITES if killable else RECORD_WRITES


def triggered(old: Replica, new: Replica) -> bool:
    """Whether the entry that took ``old`` to ``new`` changed the jobs or the active peers
    (by identity: a kind that leaves a key alone hands it on as it was)."""
    return any(getattr(old, k) is not getattr(new, k) for k in TRIGGERS)


def needs_allocation(old: Replica, new: Replica) -> bool:
    """Whether an entry that took ``old`` to ``new`` has the allocation recomputed: only when
    it changed the jobs or the active peers, and there are jobs to give peers to."""
    return triggered(old, new) and bool(new.jobs)


def _flux_reason(replica: Replica, job: str) -> str:
    killers = sorted(t.name for t in replica.jobs[job].catalog if t.flux_policy == "kill")
    return f"left without peers, and task {killers[0]!r} has flux_policy kill"


def scheduling_request(
    replica: Replica, active: tuple[PeerInfo, ...] | None = None
) -> SchedulingRequest:
    """What the schedulers read of the replica: the jobs in submission order, the peers of
    the joined groups that are not exiting (``active``, when the caller has them already),
    and the allocations so far."""
    return SchedulingRequest(
        job_scheduler=replica.job_scheduler,
        jobs=tuple(
            job_demand(replica.jobs[j], started=j in replica.started) for j in replica.job_order
        ),
        started=frozenset(j for j in replica.job_order if j in replica.started),
        peers=active_peers(replica) if active is None else active,
        previous=tuple((j, tuple(tasks.items())) for j, tasks in replica.allocations.items()),
    )


def active_peers(replica: Replica) -> tuple[PeerInfo, ...]:
    """The peers the schedulers may give work to: those of the joined groups not exiting."""
    return tuple(
        PeerInfo(p, g, frozenset(replica.group_tags.get(g, ())))
        for g in sorted(replica.groups - replica.exiting)
        for p in sorted(replica.group_peers.get(g, ()))
    )


def _record(replica: Replica, plan: Allocation, position: int) -> Replica:
    """The plan recorded: a job whose tasks keep the same peers, in whatever order, keeps its
    allocation and version (a takeover's seats among them); any other gets a new version, and
    its takeovers are over."""
    allocations, versions = replica.allocations, replica.allocation_versions
    started, done = replica.started, replica.done
    takeovers, recovering = replica.takeovers, replica.recovering
    for job, tasks in plan.items():
        before = allocations.get(job)
        if _same_peers(before, tasks):
            continue
        allocations = allocations.set(job, pmap(_heirs_in_place(replica.jobs[job], before, tasks)))
        versions = versions.set(job, position)
        done = done.discard(job)
        takeovers, recovering = takeovers.discard(job), recovering.discard(job)
        if any(tasks.values()):
            started = started.add(job)
    if allocations is replica.allocations:
        return replica
    return replica.evolve(
        allocations=allocations,
        allocation_versions=versions,
        started=started,
        done=done,
        takeovers=takeovers,
        recovering=recovering,
    )


def _heirs_in_place(
    job: Job, before: Mapping[str, tuple[str, ...]] | None, tasks: Mapping[str, tuple[str, ...]]
) -> dict[str, tuple[str, ...]]:
    """``tasks`` with each keyed task's peers in slot order so that a peer that ran slot k
    before, and runs the task still, has slot k's heir (peer.state.key_groups.heir), which owns
    the most of the key groups slot k held: its state then stays in its process, and is not
    read again (peer.runtime.state_shelf). Where two such peers share an heir, the first keeps
    it; the task's other peers fill the slots left in the plan's order."""
    ordered = dict(tasks)
    for task, peers in tasks.items():
        held = () if before is None else before.get(task, ())
        if not held or not peers or not job.keyed(task):
            continue
        groups = job.key_groups(task)
        slots: list[str | None] = [None] * len(peers)
        for k, peer in enumerate(held):
            to = heir(k, len(held), len(peers), groups)
            if peer in peers and slots[to] is None:
                slots[to] = peer
        placed = set(slots)
        rest = iter([p for p in peers if p not in placed])
        ordered[task] = tuple(p if p is not None else next(rest) for p in slots)
    return ordered


def _same_peers(
    old: Mapping[str, tuple[str, ...]] | None, new: Mapping[str, tuple[str, ...]]
) -> bool:
    if old is None or len(old) != len(new):
        return False
    return all(task in old and set(old[task]) == set(peers) for task, peers in new.items())


def with_standbys(replica: Replica, active: tuple[PeerInfo, ...]) -> Replica:
    """``replica`` with a standby for every running peer of a task that keeps one, where a
    free peer of another group can be found; unchanged maps are kept as the same objects."""
    wanting = [j for j in replica.job_order if replica.jobs[j].local_recovery_on]
    if not wanting and not replica.standbys:
        return replica
    needs = _standby_needs(replica, wanting, active)
    allocated = {p for tasks in replica.allocations.values() for ps in tasks.values() for p in ps}
    chosen = choose_standbys(needs, active, allocated, replica.standbys)
    standbys = pmap({j: _kept(replica.standbys.get(j), peers) for j, peers in chosen.items()})
    if standbys == replica.standbys:
        return replica
    return replica.evolve(standbys=standbys)


def _kept(old: PMap | None, new: dict[str, str]) -> PMap:
    return old if old is not None and old == new else pmap(new)


def _standby_needs(
    replica: Replica, jobs: list[str], active: tuple[PeerInfo, ...]
) -> list[StandbyNeed]:
    """The running peers of ``jobs`` that want a standby, by job priority, then task order,
    then id."""
    group = {p.id: p.group for p in active}
    needs = []
    for job_id in jobs:
        job = replica.jobs[job_id]
        seats = replica.allocations.get(job_id, pmap())
        for task in job.sorted_tasks():
            if job.has_standby(task):
                tags = frozenset(job.task(task).required_tags)
                needs += [
                    StandbyNeed(job_id, p, group[p], tags)
                    for p in sorted(seats.get(task, ()))
                    if p in group
                ]
    return needs
