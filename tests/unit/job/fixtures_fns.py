"""Callables the job tests name by dotted path, as a real job names its code."""

from __future__ import annotations

from typing import Any

NOT_CALLABLE = 42


def read_lines(**params: Any) -> list[str]:
    return ["a b", "b"]


def split(segment: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"word": word} for word in segment["line"].split()]


def count(segment: dict[str, Any]) -> dict[str, Any]:
    return segment


def print_counts(**params: Any) -> None:
    return None


def log_batch(event: dict[str, Any]) -> None:
    return None


def is_long(segment: dict[str, Any]) -> bool:
    return len(segment["word"]) > 3


class KeepsState:
    def open(self, state: Any) -> None:
        self.seen = state.value_state("seen")

    def __call__(self, segment: Any) -> Any:
        return segment
