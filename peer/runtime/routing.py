"""Where each segment a task emits goes next: a pure function of the job and its placement.

Every peer routes alike, so grouping holds across peers and across recoveries: a segment's
group key is hashed with crc32 over its canonical JSON (never Python's ``hash``, which is salted
per process) and the hash picks one of the downstream task's sorted peers. Ungrouped batches go
whole to one peer, the next batch to the next peer, which keeps batches large.

Flow conditions restrict the tasks they name: a segment reaches such a task only when a
condition naming it holds for the segment; a condition marked ``short_circuit`` that holds ends
the evaluation. Tasks no condition names always receive.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from peer.job.imports import resolve
from peer.job.spec import ALL
from peer.runtime.placement import Placement

Segment = Any


def key_hash(key: Any) -> int:
    return zlib.crc32(json.dumps(key, sort_keys=True, separators=(",", ":")).encode())


@dataclass(frozen=True, slots=True)
class Route:
    """One downstream task: its peers, sorted, and how segments choose among them."""

    task: str
    peers: tuple[str, ...]
    key: Callable[[Segment], Any] | None = None


@dataclass(frozen=True, slots=True)
class Condition:
    to: frozenset[str]
    predicate: Callable[[Segment], bool]
    short_circuit: bool


def key_function(fields: str | tuple[str, ...] | None, fn: str | None) -> Any:
    if fn is not None:
        return resolve(fn)
    if fields is None:
        return None
    if isinstance(fields, str):
        return lambda segment: segment.get(fields)
    return lambda segment: [segment.get(f) for f in fields]


def routes(placement: Placement, task: str) -> tuple[Route, ...]:
    """One route per downstream task of ``task``, by name."""
    job = placement.job
    return tuple(
        Route(
            down.task,
            down.peers,
            key_function(job.task(down.task).group_by_key, job.task(down.task).group_by_fn),
        )
        for down in placement.downstream.get(task, ())
    )


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

    def split(self, segments: Sequence[Segment]) -> dict[str, list[Segment]]:
        out: dict[str, list[Segment]] = {}
        turn = self.turn
        self.turn += 1
        for route in self.routes:
            if route.task in self.guarded:
                chosen = [s for s in segments if self._allowed(route.task, s)]
            else:
                chosen = list(segments)
            if not chosen:
                continue
            if route.key is None:
                out.setdefault(route.peers[turn % len(route.peers)], []).extend(chosen)
                continue
            for segment in chosen:
                peer = route.peers[key_hash(route.key(segment)) % len(route.peers)]
                out.setdefault(peer, []).append(segment)
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
