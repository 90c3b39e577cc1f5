"""Splitting a number of peers among claimants by weight, each capped: the arithmetic both the
job and the task schedulers share."""

from __future__ import annotations

from collections.abc import Sequence

UNBOUNDED = 1 << 62  # the room of a claimant without a cap: more than any cluster has peers


def spread(total: int, weights: Sequence[float], caps: Sequence[int | None]) -> list[int]:
    """Deal ``total`` out in proportion to ``weights``, never past a claimant's cap.

    Shares are rounded down and the peers left by rounding go by largest remainder, ties to
    the earliest claimant, so equal weights split evenly with the remainder to the first ones.
    What a capped claimant cannot take is dealt again among the others; zero weights take
    nothing. Returns fewer than ``total`` in all only when every claimant is full.
    """
    given = [0] * len(weights)
    left = total
    while left > 0:
        open_ = [i for i, w in enumerate(weights) if w > 0 and _room(given, caps, i) > 0]
        if not open_:
            break
        whole = sum(weights[i] for i in open_)
        exact = {i: left * weights[i] / whole for i in open_}
        shares = {i: int(exact[i]) for i in open_}
        rest = left - sum(shares.values())
        for i in sorted(open_, key=lambda i: (shares[i] - exact[i], i))[:rest]:
            shares[i] += 1
        for i in open_:
            take = min(shares[i], _room(given, caps, i))
            given[i] += take
            left -= take
    return given


def _room(given: list[int], caps: Sequence[int | None], i: int) -> int:
    cap = caps[i]
    return UNBOUNDED if cap is None else cap - given[i]
