"""Aggregations: how a window's state starts, takes a segment, merges, and reads out.

An aggregation splits taking a segment in two, as Onyx does: ``create_state_update`` reads the
segment and says what changes, ``apply_state_update`` makes the change. ``merge`` joins the states
of two extents when a segment bridges two sessions or two snapshots hold the same extent; ``init``
is its identity. ``value`` is what a trigger emits.

States are plain data (numbers, strings, lists, dicts, None) so that snapshots are msgpack as
they stand. ``apply_state_update`` and ``merge`` may change and return the state they are given:
the task state owns every state and keeps no other reference to it, which is what lets collect
append instead of copying. ``value`` must not share what the state goes on changing, since the
emitted segment outlives the call.

A user aggregation is any object with these five methods, named by dotted path (a module, or an
instance at module level); the built-ins below are instances too.
"""

from __future__ import annotations

from typing import Any, Protocol

from peer.job.imports import resolve
from peer.job.spec import Window


class Aggregation(Protocol):
    def init(self, window: Window) -> Any: ...

    def create_state_update(self, window: Window, state: Any, segment: Any) -> Any: ...

    def apply_state_update(self, window: Window, state: Any, update: Any) -> Any: ...

    def merge(self, window: Window, a: Any, b: Any) -> Any: ...

    def value(self, state: Any) -> Any: ...


class Count:
    def init(self, window: Window) -> int:
        return 0

    def create_state_update(self, window: Window, state: Any, segment: Any) -> Any:
        return 1

    def apply_state_update(self, window: Window, state: Any, update: Any) -> Any:
        return state + update

    def merge(self, window: Window, a: Any, b: Any) -> Any:
        return a + b

    def value(self, state: Any) -> Any:
        return state


class Sum(Count):
    def create_state_update(self, window: Window, state: Any, segment: Any) -> Any:
        return segment[window.field]


class Min:
    """None until a segment comes: no number is an identity for min."""

    def init(self, window: Window) -> None:
        return None

    def create_state_update(self, window: Window, state: Any, segment: Any) -> Any:
        return segment[window.field]

    def apply_state_update(self, window: Window, state: Any, update: Any) -> Any:
        return self.merge(window, state, update)

    def merge(self, window: Window, a: Any, b: Any) -> Any:
        if a is None or b is None:
            return b if a is None else a
        return self.pick(a, b)

    def pick(self, a: Any, b: Any) -> Any:
        return min(a, b)

    def value(self, state: Any) -> Any:
        return state


class Max(Min):
    def pick(self, a: Any, b: Any) -> Any:
        return max(a, b)


class Average:
    """``[sum, count]``; the value is None while the count is 0."""

    def init(self, window: Window) -> list[Any]:
        return [0, 0]

    def create_state_update(self, window: Window, state: Any, segment: Any) -> Any:
        return segment[window.field]

    def apply_state_update(self, window: Window, state: Any, update: Any) -> Any:
        return [state[0] + update, state[1] + 1]

    def merge(self, window: Window, a: Any, b: Any) -> Any:
        return [a[0] + b[0], a[1] + b[1]]

    def value(self, state: Any) -> Any:
        return state[0] / state[1] if state[1] else None


class Collect:
    """Every segment, in the order they came; a merge puts ``a``'s before ``b``'s."""

    def init(self, window: Window) -> list[Any]:
        return []

    def create_state_update(self, window: Window, state: Any, segment: Any) -> Any:
        return segment

    def apply_state_update(self, window: Window, state: Any, update: Any) -> Any:
        state.append(update)
        return state

    def merge(self, window: Window, a: Any, b: Any) -> Any:
        a.extend(b)
        return a

    def value(self, state: Any) -> Any:
        return list(state)


class CollectByKey:
    """Segments collected by the value of their ``field``, which must be hashable (and a
    string where the state is to travel as JSON rather than msgpack)."""

    def init(self, window: Window) -> dict[Any, Any]:
        return {}

    def create_state_update(self, window: Window, state: Any, segment: Any) -> Any:
        return [segment[window.field], segment]

    def apply_state_update(self, window: Window, state: Any, update: Any) -> Any:
        state.setdefault(update[0], []).append(update[1])
        return state

    def merge(self, window: Window, a: Any, b: Any) -> Any:
        for key, segments in b.items():
            a.setdefault(key, []).extend(segments)
        return a

    def value(self, state: Any) -> Any:
        return {key: list(segments) for key, segments in state.items()}


class Top:
    """The segments with the ``window.top`` highest values of ``window.field``, ties included:
    every segment whose value is at least the ``top``-th highest (as SQL's RANK() <= top), so
    that ``top: 1`` keeps every segment of the greatest value (an arg-max). The state holds
    them highest first, those of one value in the order they came; a segment whose value is
    below the cut is dropped as it comes, so the state holds ``top`` segments and their ties."""

    def init(self, window: Window) -> list[Any]:
        return []

    def create_state_update(self, window: Window, state: Any, segment: Any) -> Any:
        return segment

    def apply_state_update(self, window: Window, state: Any, update: Any) -> Any:
        return self._cut(window, [*state, update])

    def merge(self, window: Window, a: Any, b: Any) -> Any:
        return self._cut(window, [*a, *b])

    @staticmethod
    def _cut(window: Window, held: list[Any]) -> list[Any]:
        field, top = window.field, window.top or 1
        held.sort(key=lambda segment: segment[field], reverse=True)  # stable: ties keep order
        if len(held) <= top:
            return held
        cut = held[top - 1][field]
        return [segment for segment in held if segment[field] >= cut]

    def value(self, state: Any) -> Any:
        return list(state)


BUILT_INS: dict[str, Aggregation] = {
    "count": Count(),
    "sum": Sum(),
    "min": Min(),
    "max": Max(),
    "average": Average(),
    "collect": Collect(),
    "collect_by_key": CollectByKey(),
    "top": Top(),
}


def fields_read(window: Window) -> list[str] | None:
    """The fields of a segment the window's aggregation reads; None when it may read any (it
    keeps whole segments, or it is the user's). A window without the field its aggregation
    needs (which validation refuses) names none."""
    if window.aggregation == "count":
        return []
    if window.aggregation in ("sum", "min", "max", "average"):
        return [] if window.field is None else [window.field]
    return None


def aggregation(window: Window) -> Aggregation:
    """The built-in ``window.aggregation`` names, or the object its dotted path names."""
    built_in = BUILT_INS.get(window.aggregation)
    return built_in if built_in is not None else resolve(window.aggregation)
