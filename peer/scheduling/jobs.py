"""Job schedulers: how many peers each job gets, from counts alone.

Each is a pure function of the jobs in submission order, each job's (minimum, saturation),
and the number of peers. A job that cannot reach its minimum gets zero and its share goes to
the others; afterwards the peers still idle are offered, in submission order, to the jobs left
at zero (a backfill), so no job waits while enough idle peers exist for it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from peer.scheduling.spread import spread


@dataclass(frozen=True, slots=True)
class Need:
    """A job as the job scheduler sees it. ``percentage`` is None when it has none."""

    minimum: int
    saturation: int
    percentage: float | None = None


def greedy(needs: Sequence[Need], peers: int) -> list[int]:
    """Everything the earliest job can use, then the next: a later job runs only once the
    earlier ones are saturated (or could not start)."""
    given, left = [], peers
    for need in needs:
        take = min(need.saturation, left)
        take = take if take >= need.minimum else 0
        given.append(take)
        left -= take
    return given


def balanced(needs: Sequence[Need], peers: int) -> list[int]:
    """An even split, the remainder to the earliest jobs, a saturated job's surplus to the
    rest; a job left below its minimum drops out (latest first) and the split is redone."""
    return _backfill(needs, _drop_short(needs, peers, [1.0] * len(needs)), peers)


def percentage(needs: Sequence[Need], peers: int) -> list[int]:
    """Each job its percentage of the peers (rounded down, rounding leftovers by largest
    remainder). Jobs without a percentage get nothing under this scheduler. The peers of a
    job that drops out go to the other percentage jobs in proportion to their percentages;
    the share no percentage claims (when they add up to less than 100) stays idle."""
    weights = [n.percentage or 0.0 for n in needs]
    budget = min(peers, math.floor(peers * sum(weights) / 100))
    return _backfill(needs, _drop_short(needs, budget, weights), budget, weights)


def _drop_short(needs: Sequence[Need], budget: int, weights: list[float]) -> list[int]:
    live = [w > 0 and n.minimum <= n.saturation for n, w in zip(needs, weights, strict=True)]
    while True:
        given = spread(
            budget,
            [w if ok else 0.0 for w, ok in zip(weights, live, strict=True)],
            [n.saturation for n in needs],
        )
        short = [i for i, n in enumerate(needs) if live[i] and given[i] < n.minimum]
        if not short:
            return given
        live[short[-1]] = False


def _backfill(
    needs: Sequence[Need], given: list[int], budget: int, weights: list[float] | None = None
) -> list[int]:
    given = list(given)
    idle = budget - sum(given)
    for i, need in enumerate(needs):
        eligible = weights is None or weights[i] > 0
        if given[i] == 0 and eligible and need.minimum <= min(idle, need.saturation):
            given[i] = min(idle, need.saturation)
            idle -= given[i]
    return given


SCHEDULERS: dict[str, Callable[[Sequence[Need], int], list[int]]] = {
    "greedy": greedy,
    "balanced": balanced,
    "percentage": percentage,
}
