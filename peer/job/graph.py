"""The workflow as a graph: a deterministic order of its tasks, or the cycle that forbids one.

Every peer must derive the same order from the same job, so ties are broken by name rather than
by the order edges happen to be written in.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable


def topological_order(
    edges: Iterable[tuple[str, str]],
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(order, cycle)``: every task after its upstream tasks, smallest name first among those
    ready; when the graph has a cycle, ``order`` stops short and ``cycle`` names the tasks on one
    cycle in edge order, starting from its smallest name."""
    children, parents = _adjacency(edges)
    waiting = {node: len(ups) for node, ups in parents.items()}
    ready = [node for node, count in waiting.items() if count == 0]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        node = heapq.heappop(ready)
        order.append(node)
        for child in sorted(children[node]):
            waiting[child] -= 1
            if waiting[child] == 0:
                heapq.heappush(ready, child)
    stuck = {node for node, count in waiting.items() if count > 0}
    return tuple(order), _cycle(parents, stuck) if stuck else ()


def _adjacency(
    edges: Iterable[tuple[str, str]],
) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    children: dict[str, set[str]] = {}
    parents: dict[str, set[str]] = {}
    for up, down in edges:
        for node in (up, down):
            children.setdefault(node, set())
            parents.setdefault(node, set())
        children[up].add(down)
        parents[down].add(up)
    return children, parents


def _cycle(parents: dict[str, set[str]], stuck: set[str]) -> tuple[str, ...]:
    """Every stuck task has a stuck parent, so walking parents from any of them must come back
    around; the loop walked backwards is the cycle."""
    walk = [min(stuck)]
    while True:
        node = min(parents[walk[-1]] & stuck)
        if node in walk:
            loop = list(reversed(walk[walk.index(node) :]))
            start = loop.index(min(loop))
            return tuple(loop[start:] + loop[:start])
        walk.append(node)
