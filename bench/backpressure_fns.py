"""The back-pressured checkpoint bench's fn (bench/checkpoints.py): a function slow enough that
the input outruns it, so every credit window in front of it fills.

``slow`` spins for SLOW_SECONDS per segment, then does what bench/workload.py's ``f1`` does. It
spins rather than sleeps, as real Python work does: it holds the interpreter lock and a core, so
the group's loop (its polling, its credit, its barriers) waits behind it, where a sleep would free
both. It spins on the wall clock, not its thread's CPU time, so that a segment costs the same
0.7 ms however busy the shared machine is: the figures then compare the engine's choices (its
credit, its barriers) rather than the machine's load. Real work would stretch when the process
is descheduled; the receiver's measured throughput, and so its credit, follows that as well.

Jobs name it as ``bench.backpressure_fns:slow`` (the repository root is on sys.path).
"""

from __future__ import annotations

import time
from typing import Any

from bench.workload import f1

SLOW_SECONDS = 0.0007
"""Seconds per segment."""


def slow(segment: dict[str, Any]) -> dict[str, Any]:
    """count + 1, after spinning for SLOW_SECONDS."""
    clock = time.perf_counter
    end = clock() + SLOW_SECONDS
    while clock() < end:
        pass
    return f1(segment)
