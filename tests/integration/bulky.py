"""Code the data-plane tests name by dotted path: segments of a given size made on one group
and measured on another, a value no frame can carry, and a paced identity."""

from __future__ import annotations

import time
from typing import Any


def inflate(segment: dict[str, Any]) -> dict[str, Any]:
    return {"n": segment["n"], "blob": "x" * segment["size"]}


def measure(segment: dict[str, Any]) -> dict[str, Any]:
    blob = segment["blob"]
    return {"n": segment["n"], "size": len(blob), "whole": not blob.strip("x")}


def unencodable(segment: dict[str, Any]) -> dict[str, Any]:
    """A set: msgpack, and so a frame, cannot carry it."""
    return {"n": segment["n"], "tags": {"a", "b"}}


def paced(segment: dict[str, Any]) -> dict[str, Any]:
    """``inflate`` at a pace of the workload's, so the job is still running when ZooKeeper goes
    away; the test waits on the output, not on time."""
    time.sleep(0.003)
    return inflate(segment)


def set_key(segment: dict[str, Any]) -> frozenset[int]:
    """A group key no JSON holds, so it has no key group."""
    return frozenset([segment["n"]])
