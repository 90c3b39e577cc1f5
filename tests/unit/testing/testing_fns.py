"""Functions of the jobs the peer.testing tests run."""

from __future__ import annotations

import time
from typing import Any


def invert(segment: dict[str, Any]) -> dict[str, Any]:
    """Raises ZeroDivisionError on a segment whose n is 0."""
    return {"n": 1 / segment["n"]}


def double(segment: dict[str, Any]) -> dict[str, Any]:
    return {"n": 2 * segment["n"]}


def slow(segment: dict[str, Any]) -> dict[str, Any]:
    """A hundredth of a second of work per segment."""
    time.sleep(0.01)
    return segment
