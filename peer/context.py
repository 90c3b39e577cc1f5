"""The clock and randomness for job code: use these in an ``fn`` instead of ``time.time()`` and
``random.random()``.

A job with ``local_recovery`` (or standby tasks) recovers a failed task by having another peer
redo its work since the last checkpoint while the rest of the job goes on. The redone work must
make the same choices as the first run, or its output and state would differ from what the
downstream tasks already hold. So a task logs what its code read from the clock and from
randomness, and a replacement reads the logged values back. Called from a task's ``fn``, these
go through that log; called anywhere else (tests, plugins' own threads), they are plain
``time.time()`` and ``random.random()``. Either way they cost a thread-local lookup.

    from peer import context

    def stamp(segment):
        return {**segment, "seen_at": context.now(), "sample": context.random() < 0.1}

Code that reads ``time.time()`` or ``random`` directly still runs, but a task recovered locally
may then emit values that differ from its first run.
"""

from __future__ import annotations

import random as _random
import time

from peer.causal.recorder import current


def now() -> float:
    """Seconds since the epoch (as ``time.time()``), logged for the running task."""
    recorder = current()
    return time.time() if recorder is None else recorder.now()


def random() -> float:
    """A float in [0, 1) (as ``random.random()``), logged for the running task."""
    recorder = current()
    return _random.random() if recorder is None else recorder.random()
