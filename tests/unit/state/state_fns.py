"""Code the window tests name by dotted path: a user aggregation, emit, sync, predicates."""

from __future__ import annotations

from typing import Any

SYNCED: list[dict[str, Any]] = []
"""Every event ``record`` was called with; tests clear it first."""


class Distinct:
    """The sorted distinct values of the window's field: a user aggregation as an instance."""

    def init(self, window: Any) -> list[Any]:
        return []

    def create_state_update(self, window: Any, state: Any, segment: Any) -> Any:
        return segment[window.field]

    def apply_state_update(self, window: Any, state: Any, update: Any) -> Any:
        return self.merge(window, state, [update])

    def merge(self, window: Any, a: Any, b: Any) -> Any:
        return sorted(set(a) | set(b))

    def value(self, state: Any) -> Any:
        return list(state)


DISTINCT = Distinct()


class NoMerge:
    def init(self, window: Any) -> int:
        return 0

    def create_state_update(self, window: Any, state: Any, segment: Any) -> int:
        return 1

    def apply_state_update(self, window: Any, state: Any, update: Any) -> Any:
        return state + update

    def value(self, state: Any) -> Any:
        return state


NO_MERGE = NoMerge()
NOT_CALLABLE = 42


def record(event: dict[str, Any]) -> None:
    SYNCED.append(event)


def total(event: dict[str, Any]) -> dict[str, Any]:
    return {"user": event["key"], "at": event["end"], "total": event["value"]}


def twice(event: dict[str, Any]) -> list[Any]:
    return [event["value"], event["value"]]


def nothing(event: dict[str, Any]) -> None:
    return None


def is_last(segment: dict[str, Any]) -> bool:
    return bool(segment.get("last"))


def read(**params: Any) -> list[Any]:
    return []


def identity(segment: Any) -> Any:
    return segment
