"""The scheduling subset of a replica, under random logs: a scheduler given only that subset,
after a trip through JSON, computes the allocation the log records, and the subset's digest
tells requests apart exactly when scheduling could tell them apart."""

from __future__ import annotations

import dataclasses
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from peer.job.demand import job_demand
from peer.log.allocation import active_peers, needs_allocation, scheduling_request
from peer.log.apply import apply_entry, kind_of
from peer.log.entries.jobs import finish
from peer.log.entry import Entry
from peer.log.replica import Replica
from peer.log.takeover import take_over
from peer.scheduling import JOB_SCHEDULERS, TASK_SCHEDULERS, Allocation, PeerInfo, allocate
from peer.scheduling.request import Planner, SchedulingRequest, schedule
from tests.unit.log.test_allocation_properties import GROUPS, steps


def plain(allocation) -> dict[str, dict[str, list[str]]]:
    """Peers sorted: a takeover keeps a seat's order, the schedulers sort."""
    return {j: {t: sorted(ps) for t, ps in tasks.items()} for j, tasks in allocation.items()}


def over_the_wire(request: SchedulingRequest) -> SchedulingRequest:
    return SchedulingRequest.from_json(json.loads(json.dumps(request.to_json())))


def read_off(replica: Replica, held: frozenset[str]) -> Allocation:
    """The allocation computed straight from the replica, as the log did before the subset
    existed, with the ``held`` jobs' tasks asking for no more peers than they have: the oracle
    the subset must not lose anything against."""
    demands = []
    for j in replica.job_order:
        demand = job_demand(replica.jobs[j], started=j in replica.started)
        if j in held:
            seats = replica.allocations[j]
            demand = dataclasses.replace(demand, tasks=tuple(
                dataclasses.replace(t, min_peers=min(t.min_peers, len(seats[t.name])),
                                    max_peers=len(seats[t.name]))
                for t in demand.tasks
            ))  # fmt: skip
        demands.append(demand)
    peers = [
        PeerInfo(p, g, frozenset(replica.group_tags.get(g, ())))
        for g in sorted(replica.groups - replica.exiting)
        for p in sorted(replica.group_peers.get(g, ()))
    ]
    return allocate(replica.job_scheduler, demands, peers, replica.allocations)


def replicas(data: st.DataObject, longest: int = 30) -> list[Step]:
    """Every entry of a random log that the log does not refuse, with its replicas."""
    replica = Replica().evolve(groups=Replica().groups.update(GROUPS))
    seen = []
    for position in range(data.draw(st.integers(1, longest))):
        entry = steps(data.draw, replica).at(position)
        new = apply_entry(replica, entry).new
        try:
            mid = kind_of(entry).apply(replica, entry)
        except Exception:  # refused: the log keeps the replica, nothing is scheduled
            mid = None
        if mid is not None:
            seen.append(Step(replica, entry, mid, new))
        replica = new
    return seen


@dataclasses.dataclass(frozen=True)
class Step:
    """One entry of a log: the replica before it, after its own change, after all of it."""

    before: Replica
    entry: Entry
    applied: Replica
    new: Replica


def wiring(asked: list[SchedulingRequest]) -> Planner:
    """A planner that sends every request through JSON, keeps it in ``asked``, and schedules
    what came out, as a scheduling server does."""

    def plan(request: SchedulingRequest, position: int) -> Allocation:
        wired = over_the_wire(request)
        assert wired == request
        asked.append(wired)
        return schedule(wired)

    return plan


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_the_subset_over_the_wire_schedules_what_the_log_records(data):
    for step in replicas(data):
        if not needs_allocation(step.before, step.applied):
            continue
        asked: list[SchedulingRequest] = []
        assert apply_entry(step.before, step.entry, wiring(asked)).new == step.new
        mid = take_over(step.applied, active_peers(step.applied))
        for job in sorted(set(step.applied.jobs) - set(step.new.jobs)):  # killed by flux policy
            mid = finish(mid, job, "killed")
        final = plain(schedule(asked[-1]))
        assert final == plain(step.new.allocations) == plain(read_off(mid, step.new.held_back))


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_equal_subsets_give_equal_digests(data):
    for new in [step.new for step in replicas(data, longest=15)]:
        request = scheduling_request(new)
        shuffled = dataclasses.replace(
            request,
            peers=tuple(data.draw(st.permutations(request.peers))),
            jobs=tuple(
                dataclasses.replace(j, percentage=_other_number(j.percentage)) for j in request.jobs
            ),
        )
        assert shuffled == request
        assert shuffled.digest() == request.digest() == over_the_wire(request).digest()
        assert scheduling_request(new).digest() == request.digest()


def _other_number(value: float | None) -> float | int | None:
    """The same percentage written the other way (50 for 50.0), equal to the schedulers."""
    return int(value) if value is not None and value == int(value) else value


def changes(draw: st.DrawFn, request: SchedulingRequest) -> SchedulingRequest:
    """The request with one field that scheduling reads changed."""
    r = dataclasses.replace
    options = ["scheduler", "peer", "previous"]
    if request.jobs:
        options += ["task", "job", "started"]
    if request.peers:
        options += ["tags", "group", "drop"]
    if len(request.jobs) > 1:
        options.append("order")
    choice = draw(st.sampled_from(options))
    if choice == "scheduler":
        other = [s for s in JOB_SCHEDULERS if s != request.job_scheduler]
        return r(request, job_scheduler=draw(st.sampled_from(other)))
    if choice == "peer":
        return r(request, peers=(*request.peers, PeerInfo("new-peer", "g9")))
    if choice == "previous":
        return r(request, previous=(*request.previous, ("gone-job", (("t", ("x",)),))))
    if choice == "order":
        return r(request, jobs=(*request.jobs[1:], request.jobs[0]))
    if choice in ("task", "job", "started"):
        return _changed_job(draw, request, choice)
    return _changed_peer(draw, request, choice)


def _changed_job(draw: st.DrawFn, request: SchedulingRequest, choice: str) -> SchedulingRequest:
    r = dataclasses.replace
    index = draw(st.integers(0, len(request.jobs) - 1))
    job = request.jobs[index]
    if choice == "started":
        return r(request, started=request.started ^ {job.id})
    if choice == "job":
        other = [s for s in TASK_SCHEDULERS if s != job.task_scheduler]
        job = r(job, task_scheduler=draw(st.sampled_from(other)))
    else:
        job = r(job, tasks=_changed_task(draw, job.tasks))
    return r(request, jobs=(*request.jobs[:index], job, *request.jobs[index + 1 :]))


def _changed_peer(draw: st.DrawFn, request: SchedulingRequest, choice: str) -> SchedulingRequest:
    r = dataclasses.replace
    index = draw(st.integers(0, len(request.peers) - 1))
    peer = request.peers[index]
    rest = request.peers[:index] + request.peers[index + 1 :]
    if choice == "drop":
        return r(request, peers=rest)
    if choice == "tags":
        return r(request, peers=(*rest, r(peer, tags=peer.tags ^ {"fpga"})))
    return r(request, peers=(*rest, r(peer, group=peer.group + "x")))


def _changed_task(draw: st.DrawFn, tasks):
    index = draw(st.integers(0, len(tasks) - 1))
    task = tasks[index]
    field = draw(st.sampled_from(["min", "max", "tags", "percentage", "name"]))
    if field == "min":
        task = dataclasses.replace(
            task, min_peers=task.min_peers + 1, max_peers=task.max_peers and task.max_peers + 1
        )
    elif field == "max":
        task = dataclasses.replace(task, max_peers=None if task.max_peers else task.min_peers + 5)
    elif field == "tags":
        task = dataclasses.replace(task, required_tags=task.required_tags ^ {"fpga"})
    elif field == "percentage":
        task = dataclasses.replace(task, percentage=7.5 if task.percentage != 7.5 else 8.0)
    else:
        task = dataclasses.replace(task, name=task.name + "x")
    return (*tasks[:index], task, *tasks[index + 1 :])


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_a_change_scheduling_reads_changes_the_digest(data):
    for new in [step.new for step in replicas(data, longest=15)[-3:]]:
        request = scheduling_request(new)
        changed = changes(data.draw, request)
        assert changed != request
        assert changed.digest() != request.digest()
        assert over_the_wire(changed) == changed
