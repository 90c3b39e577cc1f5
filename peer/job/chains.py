"""Operator chains: consecutive tasks that can run as one, made into one task at submit.

A batch that goes from one task to the next pays for what lies between them: an emitter's
routing and credit, a downstream inbox, barrier alignment, and a turn of the group's loop for
each task it passes. Where nothing needs any of that, the two tasks run as one: the chain's
task takes each batch through every fn in order and sends on only what the last one returns,
as Flink chains operators.

An edge ``a -> b`` is chained when it is a forward edge that regroups nothing and decides
nothing on the way:

- ``a`` is an input or a function task and ``b`` a function task, both applied in line (python
  or arrow: a Spark fn runs elsewhere, in its own order);
- ``a`` sends to ``b`` alone and ``b`` takes from ``a`` alone, with no flow condition from ``a``;
- ``b`` does not group (it would take its segments by key from every peer of ``a``), and
  neither has windows or a join (their output is what the windows emit, not the fn's);
- both run on the same peers: equal ``min_peers``, ``max_peers``, ``required_tags``,
  ``percentage``, ``flux_policy`` and ``standby``;
- no lifecycle names either of them, or every task;
- neither says ``chaining: false``;
- in a job that recovers locally, ``a`` is a function too: an input's failure rolls its job
  back, so a function chained into it would lose the seat a standby can take over.

A chain is a longest run of chained edges. Its task is the first one's, named for every member
joined by ``+`` (``read+parse+clean``), so the job's status and metrics show the chain, with
the others in ``chained``; edges, flow conditions, windows, joins and late outputs that named a
member name the chain. The job the log carries is the chained one; a job resumed from another's
checkpoint must be chained the same way, as it is when the two are the same job.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from peer.job.spec import ALL, REPLAYABLE_ENGINES, FlowCondition, Job, Join, Task, Window

SAME_PEERS = ("min_peers", "max_peers", "required_tags", "percentage", "flux_policy", "standby")
"""What two tasks must agree on to run on the same peers as one."""
CHAIN_SEPARATOR = "+"


def chained(job: Job) -> Job:
    """``job`` with every chain made one task; the job itself when nothing chains."""
    links = chain_links(job)
    if not links:
        return job
    heads = _heads(job, links)
    names = {member: CHAIN_SEPARATOR.join(chain) for chain in heads.values() for member in chain}
    kept = [task.name for task in job.catalog if task.name not in names]
    if set(kept) & set(names.values()):
        return job  # a chain's name is taken by a task of the job: it stays as it is
    return _renamed(job, heads, names)


def chain_links(job: Job) -> dict[str, str]:
    """Each task whose edge to its one downstream task is chained, to that task."""
    downs: dict[str, list[str]] = {}
    ups: dict[str, list[str]] = {}
    for up, down in job.workflow:
        downs.setdefault(up, []).append(down)
        ups.setdefault(down, []).append(up)
    hooked = {lifecycle.task for lifecycle in job.lifecycles}
    if ALL in hooked:
        return {}
    parts: list[Window | Join] = [*job.windows, *job.joins]
    parted = {part.task for part in parts} | hooked
    conditioned = {condition.from_task for condition in job.flow_conditions}
    links = {}
    for up in sorted(downs):
        if len(downs[up]) != 1 or up in conditioned:
            continue
        down = downs[up][0]
        alone = len(ups[down]) == 1 and not parted & {up, down}
        if alone and _chainable(job.task(up), job.task(down), job.local_recovery_on):
            links[up] = down
    return links


def _chainable(a: Task, b: Task, local_recovery: bool) -> bool:
    """Whether ``b`` can run in ``a``'s task; in a job that recovers locally only between
    function tasks, so that a function keeps the seat it can be taken over in."""
    return (
        (a.kind == "function" or (a.kind == "input" and not local_recovery))
        and b.kind == "function"
        and a.engine in REPLAYABLE_ENGINES
        and b.engine in REPLAYABLE_ENGINES
        and not b.keyed
        and a.chaining
        and b.chaining
        and all(getattr(a, name) == getattr(b, name) for name in SAME_PEERS)
    )


def _heads(job: Job, links: dict[str, str]) -> dict[str, tuple[str, ...]]:
    """Each chain by its first task: the members in order."""
    linked_to = set(links.values())
    heads = {}
    for head in sorted(set(links) - linked_to):
        chain = [head]
        while chain[-1] in links:
            chain.append(links[chain[-1]])
        heads[head] = tuple(chain)
    return heads


def _renamed(job: Job, heads: dict[str, tuple[str, ...]], names: dict[str, str]) -> Job:
    """The job with each chain one task and every name of a member the chain's."""

    def name(task: str) -> str:
        return names.get(task, task)

    catalog = []
    for task in job.catalog:
        if task.name in heads:
            members = [job.task(member) for member in heads[task.name][1:]]
            catalog.append(_fused(task, members, name(task.name)))
        elif task.name not in names:
            catalog.append(task)
    workflow = tuple((name(up), name(down)) for up, down in job.workflow if name(up) != name(down))
    return replace(
        job,
        workflow=workflow,
        catalog=tuple(catalog),
        flow_conditions=tuple(_condition(c, name) for c in job.flow_conditions),
        windows=tuple(_window(w, name) for w in job.windows),
        joins=tuple(_join(j, name) for j in job.joins),
    )


def _fused(head: Task, members: list[Task], name: str) -> Task:
    """``head`` running every member after it (a chain is as long as it can be, so a job that
    is chained already gains none)."""
    return replace(head, name=name, chained=(*head.chained, *members))


def _condition(condition: FlowCondition, name: Callable[[str], str]) -> FlowCondition:
    to = condition.to if isinstance(condition.to, str) else tuple(map(name, condition.to))
    return replace(condition, from_task=name(condition.from_task), to=to)


def _window(window: Window, name: Callable[[str], str]) -> Window:
    late = None if window.late is None else name(window.late)
    return replace(window, task=name(window.task), late=late)


def _join(join: Join, name: Callable[[str], str]) -> Join:
    late = None if join.late is None else name(join.late)
    return replace(
        join, task=name(join.task), left=name(join.left), right=name(join.right), late=late
    )
