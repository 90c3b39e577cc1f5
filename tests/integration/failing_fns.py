"""Code the bad-input tests name by dotted path: a task whose fn raises on its first segment, or
tries to end its process there (by an exit that can be caught, or one that cannot)."""

from __future__ import annotations

import os
from typing import Any

FAILURE = "the word list is missing: cannot split"
EXIT_CODE = 3


def split_fails(segment: dict[str, Any]) -> list[dict[str, Any]]:
    raise ValueError(FAILURE)


def exits(segment: dict[str, Any]) -> None:
    raise SystemExit(EXIT_CODE)


def interrupts(segment: dict[str, Any]) -> None:
    raise KeyboardInterrupt


def ends_its_process(segment: dict[str, Any]) -> None:
    """What no ``except`` catches: the process is gone at once."""
    os._exit(EXIT_CODE)
