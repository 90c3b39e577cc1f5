"""Where each segment a task emits goes next: a pure function of the job and its placement.

Every peer routes alike, so grouping holds across peers and across recoveries: a segment's
group key falls in one of the downstream task's key groups (peer.state.key_groups: crc32 over
its canonical JSON, never Python's ``hash``, which is salted per process) and the peer whose
slot owns that key group takes it, the task's peers sorted. Ungrouped batches go
whole to one peer, the next batch to the next peer, which keeps batches large. A colocated job
runs a whole pipeline in each peer group, so its ungrouped batches take turns only among the
downstream peers in the sender's own group when it has any: they never leave the process.
Grouped segments still go to their key's peer wherever it is, since a key has one owner.

An Arrow batch stays Arrow: grouped by fields, only its key columns are read, each distinct key
hashed once, and every row goes to the peer its row would (``peer.values.columnar.FieldKey``);
grouped by a fn, its rows are made for the fn. A flow condition's predicate reads rows, and the
rows it keeps are taken from the Arrow batch.

A join's task is reached by key along each edge: rows of its left task by ``left_key``, rows of
its right task by ``right_key``, so that equal keys of both sides meet at one peer.

A window or a join may send the rows behind the watermark to a side output, a task downstream
that takes those alone (``LateRouter``).

Flow conditions restrict the tasks they name: a segment reaches such a task only when a
condition naming it holds for the segment; a condition marked ``short_circuit`` that holds ends
the evaluation. Tasks no condition names always receive.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from peer.job.imports import resolve
from peer.job.spec import ALL, DEFAULT_MAX_PARALLELISM
from peer.runtime.placement import Placement
from peer.state.key_groups import key_group, owner
from peer.values.columnar import Batch, FieldKey, Late, SchemaViolation, Segment, rows, take


@dataclass(frozen=True, slots=True)
class Route:
    """One downstream task: its peers, sorted, and how segments choose among them."""

    task: str
    peers: tuple[str, ...]
    key: Callable[[Segment], Any] | None = None
    local: tuple[str, ...] = ()
    """The peers ungrouped batches keep to (a colocated job's downstream peers in the sender's
    group); empty: every peer takes its turn."""
    groups: int = DEFAULT_MAX_PARALLELISM
    """The task's key groups (its maximum parallelism), which grouped segments go by."""

    def slot_of(self, key: Any) -> int:
        """The index, among the peers, of the one whose slot owns ``key``'s key group; a key
        with none is a SchemaViolation naming the task it was meant for."""
        try:
            group = key_group(key, self.groups)
        except SchemaViolation as e:
            raise SchemaViolation(f"task {self.task!r}: {e}") from None
        return owner(group, self.groups, len(self.peers))

    def in_turn(self, turn: int) -> str:
        """The peer that the sender's ``turn``-th ungrouped batch goes to."""
        among = self.local or self.peers
        return among[turn % len(among)]


@dataclass(frozen=True, slots=True)
class Condition:
    to: frozenset[str]
    predicate: Callable[[Segment], bool]
    short_circuit: bool


def key_function(
    fields: str | tuple[str, ...] | None, fn: str | None, task: str = ""
) -> Callable[[Segment], Any] | None:
    """The group key of task ``task``, chosen once for all its segments: its fn, the fields it
    names (a segment without one of them is refused, naming the task), or None."""
    if fn is not None:
        return resolve(fn)
    if fields is None:
        return None
    return FieldKey(fields, task)


def routes(placement: Placement, task: str, sender: str | None = None) -> tuple[Route, ...]:
    """One route per downstream task of ``task``, by name, as peer ``sender`` routes: a colocated
    job's ungrouped routes keep to the peers of the sender's group."""
    job = placement.job
    group = placement.groups.get(sender) if sender is not None else None
    colocated = job.task_scheduler == "colocated" and group is not None
    found = []
    for down in placement.downstream.get(task, ()):
        spec = job.task(down.task)
        join = job.join_of(down.task)
        key = (key_function(spec.group_by_key, spec.group_by_fn, spec.name) if join is None
               else key_function(join.key(join.side(task)), None, spec.name))  # fmt: skip
        local: tuple[str, ...] = ()
        if colocated and key is None:
            local = tuple(p for p in down.peers if placement.groups.get(p) == group)
        found.append(Route(down.task, down.peers, key, local, job.key_groups(down.task)))
    return tuple(found)


def conditions(placement: Placement, task: str) -> tuple[Condition, ...]:
    children = frozenset(down.task for down in placement.downstream.get(task, ()))
    return tuple(
        Condition(
            children if c.to == ALL else frozenset(c.to), resolve(c.predicate), c.short_circuit
        )
        for c in placement.job.flow_conditions
        if c.from_task == task
    )


class Router:
    """Splits one task's output batches into per-peer batches."""

    def __init__(self, routes: Sequence[Route], conditions: Sequence[Condition] = ()) -> None:
        self.routes = tuple(r for r in routes if r.peers)
        self.conditions = tuple(conditions)
        self.guarded = frozenset(t for c in self.conditions for t in c.to)
        self.turn = 0
        self._peers = sorted({p for route in self.routes for p in route.peers})

    def split(self, segments: Batch) -> dict[str, Batch]:
        """Each peer's part of ``segments``, in their order; an Arrow batch's parts are Arrow.
        The first route may take the batch itself (no copy); each other gets a list of its own,
        so no two receivers share one."""
        if isinstance(segments, pa.RecordBatch):
            return self._split_arrow(segments)
        out: dict[str, list[Segment]] = {}
        turn = self.turn
        self.turn += 1
        for number, route in enumerate(self.routes):
            if route.task in self.guarded:
                chosen = [s for s in segments if self._allowed(route.task, s)]
            else:
                chosen = segments if number == 0 else list(segments)
            if chosen:
                _place(route, chosen, turn, out)
        return out

    def _split_arrow(self, batch: pa.RecordBatch) -> dict[str, Batch]:
        out: dict[str, Batch] = {}
        turn = self.turn
        self.turn += 1
        segments: list[Segment] | None = None
        for route in self.routes:
            chosen = batch
            if route.task in self.guarded:
                segments = rows(batch) if segments is None else segments
                allowed = [self._allowed(route.task, s) for s in segments]
                chosen = batch.filter(pa.array(allowed, pa.bool_()))
            if not chosen.num_rows:
                continue
            if route.key is None:
                out[route.in_turn(turn)] = chosen
            elif isinstance(route.key, FieldKey):
                out.update(_by_key_columns(route, route.key, chosen))
            else:
                owners = [route.slot_of(route.key(s)) for s in rows(chosen)]
                out.update(_parts(route.peers, chosen, pa.array(owners, pa.int64())))
        return out

    def _allowed(self, task: str, segment: Segment) -> bool:
        for condition in self.conditions:
            if condition.predicate(segment):
                if task in condition.to:
                    return True
                if condition.short_circuit:
                    return False
        return False

    def peers(self) -> list[str]:
        """Every peer this task sends to, which is every peer owed its end-of-input marker."""
        return self._peers


class LateRouter(Router):
    """The router of a task whose windows or join send the rows behind the watermark to side
    outputs: each such row (a ``Late``) goes, as it came, to its task alone, which takes
    nothing else of this task's; the rest go to the other tasks as any router sends them."""

    def __init__(self, routes: Sequence[Route], conditions: Sequence[Condition],
                 late: frozenset[str]) -> None:  # fmt: skip
        super().__init__([r for r in routes if r.task not in late], conditions)
        self.late = {r.task: r for r in routes if r.task in late and r.peers}
        self._peers = sorted({*self._peers, *(p for r in self.late.values() for p in r.peers)})

    def split(self, segments: Batch) -> dict[str, Batch]:
        if isinstance(segments, pa.RecordBatch):
            return super().split(segments)
        late: dict[str, list[Segment]] = {}
        on_time = []
        for segment in segments:
            if type(segment) is Late:
                late.setdefault(segment.to, []).append(segment.segment)
            else:
                on_time.append(segment)
        out: dict[str, Any] = super().split(on_time) if on_time else {}
        turn = self.turn
        for task, held in late.items():
            route = self.late.get(task)
            if route is not None:
                _place(route, held, turn, out)
        return out


def router_for(
    routes: Sequence[Route], conditions: Sequence[Condition], late: frozenset[str]
) -> Router:
    """A task's router, chosen once: one that sends late rows to their side outputs when its
    windows or join name any."""
    return LateRouter(routes, conditions, late) if late else Router(routes, conditions)


def _place(route: Route, segments: list[Segment], turn: int, out: dict[str, Any]) -> None:
    """``segments`` for ``route`` into ``out``: by key, or whole to the peer whose turn it is."""
    if route.key is None:
        out[route.in_turn(turn)] = segments
    else:
        _by_key(route, route.key, segments, out)


def _by_key(
    route: Route,
    key_of: Callable[[Segment], Any],
    segments: Sequence[Segment],
    out: dict[str, list[Segment]],
) -> None:
    """Each segment to the peer of ``route`` that owns its key's key group. A key that is a str
    or an int is hashed once per batch (only those: 1, 1.0 and True are equal as dict keys but
    not as JSON)."""
    peers = route.peers
    owners: dict[str | int, str] = {}
    for segment in segments:
        key = key_of(segment)
        kind = type(key)
        if kind is str or kind is int:
            peer = owners.get(key)
            if peer is None:
                peer = owners[key] = peers[route.slot_of(key)]
        else:
            peer = peers[route.slot_of(key)]
        out.setdefault(peer, []).append(segment)


def _by_key_columns(
    route: Route, key: FieldKey, batch: pa.RecordBatch
) -> dict[str, pa.RecordBatch]:
    """Each peer's rows of ``batch`` by their key's key group, each distinct key hashed once."""
    peers = route.peers
    if len(peers) == 1:
        key.check(batch)
        return {peers[0]: batch}
    keys, index = key.distinct(batch)
    owners = pa.array([route.slot_of(k) for k in keys], pa.int64())
    return _parts(peers, batch, owners.take(index))


def _parts(
    peers: tuple[str, ...], batch: pa.RecordBatch, owners: pa.Array
) -> dict[str, pa.RecordBatch]:
    """The rows of ``batch`` whose owner is each peer's index, in their order."""
    present = pc.unique(owners).to_pylist()
    if len(present) == 1:
        return {peers[present[0]]: batch}
    return {
        peers[owner]: take(batch, pc.indices_nonzero(pc.equal(owners, owner)))
        for owner in sorted(present)
    }
