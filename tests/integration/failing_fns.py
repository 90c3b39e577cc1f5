"""Code the bad-input tests name by dotted path: a task whose fn raises on its first segment."""

from __future__ import annotations

from typing import Any

FAILURE = "the word list is missing: cannot split"


def split_fails(segment: dict[str, Any]) -> list[dict[str, Any]]:
    raise ValueError(FAILURE)
