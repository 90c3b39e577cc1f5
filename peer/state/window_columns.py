"""A window taking an Arrow batch by its columns: the extents each row falls in, found for every
row at once (numpy), and each key's share of each extent aggregated at once, to be merged into
the extent's state as the aggregation's ``merge`` joins two states. No row is made but those a
``top`` window may keep.

It gives the state that taking the rows one by one gives (peer.state.task_state), and is used
only where that holds. A window qualifies once, when its task is built: fixed, sliding or
global, with a built-in count, sum, min, max, average or top (``qualifies``); and, as the task
state checks with what it already knows of its windows, no trigger that looks at each segment as
it comes (a segment count or a punctuation), and no side output for late rows.
A batch qualifies as it comes (``shares`` gives None for one that does not, which is then taken
as rows, whose path refuses what it must):
- the time field: integers or floats, none null, NaN or infinite, each within 2**53 of zero,
  where a float64 holds an integer exactly, so that the index of its extent is computed in the
  very arithmetic ``peer.state.windows`` uses;
- the aggregated field: integers without nulls for sum, min, max and average, summed in int64
  with room to spare (floats summed in another order could differ in their last bit, and min
  tells ``-0.0`` from ``0.0`` by which came first); integers or floats without nulls or NaN
  for top, whose state keeps the rows themselves.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from peer.job.spec import Window
from peer.state.windows import GLOBAL, Extent, extent_at
from peer.values.columnar import column_of, rows

EXACT = 2**53
"""Below this, every integer is a float64 exactly."""
ROOM = 2**62
"""An int64 sum whose terms' magnitudes add up to less than this cannot overflow."""
BY_COLUMNS = frozenset({"count", "sum", "min", "max", "average", "top"})


def qualifies(window: Window) -> bool:
    """Whether the kind and aggregation of ``window`` allow taking columns (module docstring)."""
    return window.type in ("fixed", "sliding", "global") and window.aggregation in BY_COLUMNS


@dataclass(frozen=True, slots=True)
class Taken:
    """What one window takes of a batch, as groups of rows of one key in one extent, by key
    then extent start: each group's key (its index in the batch's distinct keys), extent, size
    and aggregation state of its rows alone; and how many rows were late (behind the mark)."""

    keys: list[int]
    extents: list[Extent]
    sizes: list[int]
    partials: list[Any]
    late: int


def shares(window: Window, batch: pa.RecordBatch, keys: np.ndarray, mark: float) -> Taken | None:
    """What ``window`` takes of ``batch``, whose row i has the key numbered ``keys[i]``, the
    watermark being ``mark``; None when the batch's columns do not qualify."""
    if window.type == "global":
        where, ks, late = np.arange(batch.num_rows, dtype=np.int64), None, 0
    else:
        t = _times(batch, window.key)  # type: ignore[arg-type]
        if t is None:
            return None
        on_time = np.flatnonzero(~(t < mark))
        late = batch.num_rows - len(on_time)
        where, ks = _placed(window, t[on_time])
        where = on_time[where]
    partial = _partials(window, batch)
    if partial is None:
        return None
    group_keys = keys[where]
    order = np.lexsort((where, group_keys) if ks is None else (where, ks, group_keys))
    where, group_keys = where[order], group_keys[order]
    if ks is None:
        starts = _starts(group_keys)
        extents = [GLOBAL] * len(starts)
    else:
        ks = ks[order]
        starts = _starts(group_keys, ks)
        firsts = ks[starts]
        made = {k: extent_at(window, k) for k in np.unique(firsts).tolist()}
        extents = [made[k] for k in firsts.tolist()]
    sizes = np.diff(np.append(starts, len(where)))
    return Taken(group_keys[starts].tolist(), extents, sizes.tolist(),
                 partial(where, starts, sizes), late)  # fmt: skip


def _times(batch: pa.RecordBatch, name: str) -> np.ndarray | None:
    """The time column as numbers numpy compares as Python does, or None (module docstring)."""
    column = column_of(batch, name)
    if column is None or column.null_count:
        return None
    kind = column.type
    if not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
        return None
    t = column.to_numpy(zero_copy_only=False)
    if len(t) and not (np.isfinite(t).all() and t.min() > -EXACT and t.max() < EXACT):
        return None  # (not abs: the least int64 is its own absolute value)
    return t.astype(np.int64) if pa.types.is_integer(kind) else t.astype(np.float64)


def _placed(window: Window, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each (row, extent index) pair of rows at times ``t``: the rows' positions in ``t`` and
    their extents' indices (see peer.state.windows.extents)."""
    if window.type == "fixed":
        return np.arange(len(t), dtype=np.int64), _index(t, window.range)  # type: ignore[arg-type]
    slide, range_ = window.slide, window.range
    k = _index(t, slide)  # type: ignore[arg-type]
    positions, indices = [], []
    held = np.ones(len(t), dtype=bool)
    while True:
        held &= k * slide + range_ > t  # type: ignore[operator]
        if not held.any():
            break
        positions.append(np.flatnonzero(held))
        indices.append(k[held])
        k = k - 1
    if not positions:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate(positions), np.concatenate(indices)


def _index(t: np.ndarray, step: float) -> np.ndarray:
    """peer.state.windows._index for every time at once, in the same arithmetic."""
    k = np.floor(t / step).astype(np.int64)
    while (over := k * step > t).any():
        k -= over
    while (under := (k + 1) * step <= t).any():
        k += under
    return k


def _starts(*columns: np.ndarray) -> np.ndarray:
    """Where each run of equal rows begins, across ``columns`` sorted together."""
    n = len(columns[0])
    if not n:
        return np.zeros(0, dtype=np.int64)
    change = np.zeros(n, dtype=bool)
    change[0] = True
    for column in columns:
        change[1:] |= column[1:] != column[:-1]
    return np.flatnonzero(change)


Partials = Callable[[np.ndarray, np.ndarray, np.ndarray], list[Any]]
"""Given the rows taken, grouped (positions in the batch), where each group starts and its
size: each group's aggregation state."""


def _partials(window: Window, batch: pa.RecordBatch) -> Partials | None:
    """How each group's state is made from the batch's aggregated column, or None when that
    column does not qualify."""
    kind = window.aggregation
    if kind == "count":
        return _counted
    column = column_of(batch, window.field)  # type: ignore[arg-type]
    if column is None or column.null_count:
        return None
    if kind == "top":
        return _top(window, batch, column)
    if not pa.types.is_integer(column.type) or pa.types.is_uint64(column.type):
        return None
    values = column.to_numpy().astype(np.int64)
    if kind in ("min", "max"):
        return functools.partial(_reduced, np.minimum if kind == "min" else np.maximum, values)
    if len(values) and max(-int(values.min()), int(values.max())) >= ROOM // len(values):
        return None
    if kind == "sum":
        return functools.partial(_reduced, np.add, values)
    return functools.partial(_averaged, values)


def _reduced(
    reduce: np.ufunc, values: np.ndarray, where: np.ndarray, starts: np.ndarray, sizes: np.ndarray
) -> list[Any]:
    """Each group's values reduced by ``reduce``: its sum, least or greatest."""
    return reduce.reduceat(values[where], starts).tolist() if len(starts) else []


def _averaged(
    values: np.ndarray, where: np.ndarray, starts: np.ndarray, sizes: np.ndarray
) -> list[Any]:
    """Each group's ``[sum, count]``, the state of peer.state.aggregations.Average."""
    totals = _reduced(np.add, values, where, starts, sizes)
    return [[total, size] for total, size in zip(totals, sizes.tolist(), strict=True)]


def _counted(where: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> list[Any]:
    return sizes.tolist()


def _top(window: Window, batch: pa.RecordBatch, column: pa.Array) -> Partials | None:
    """Each group's rows of its ``top`` highest values, ties included, in the order they came:
    no row below that cut could be kept by the rows one by one, whose cut only rises."""
    kind = column.type
    if not (pa.types.is_integer(kind) or pa.types.is_floating(kind)):
        return None
    values = column.to_numpy()
    if pa.types.is_floating(kind) and np.isnan(values).any():
        return None
    top = window.top or 1

    def partial(where: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> list[Any]:
        groups = []
        for start, size in zip(starts.tolist(), sizes.tolist(), strict=True):
            members = where[start : start + size]
            if size > top:
                group_values = values[members]
                cut = np.partition(group_values, size - top)[size - top]
                members = members[group_values >= cut]
            groups.append(members)
        kept = np.concatenate(groups) if groups else np.zeros(0, dtype=np.int64)
        made = iter(rows(batch.take(pa.array(kept, pa.int64()))))
        return [[next(made) for _ in range(len(members))] for members in groups]

    return partial
