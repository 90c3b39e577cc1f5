"""How a process that carries segments has Python's cyclic garbage collector run.

Segments are plain dicts and lists, made and dropped by the hundred thousand a second, and
nearly none of them is in a cycle; yet every one counts towards the collector's young
generation, and with CPython's default threshold (2,000 objects) a young collection runs every
few batches. Each one promotes what is alive at that moment (the batches in inboxes, the
in-flight log, keyed state) to older generations, and every few hundred thousand objects made
a full collection walks every object the process holds. On a loaded machine those walks were
the data plane's longest stalls: with a process spinning on one core beside it, a paced job's
p99 latency went from under a millisecond to about 100 ms in runs whose process held a few
million objects, and to under a millisecond with the collector off.

A young generation of ``YOUNG`` objects makes collections that much rarer, and so the full
ones too, while each young collection still walks only the objects made since the last one.
What the process holds when it starts carrying segments (its modules, its configuration),
once collected, is frozen out of every later collection (``gc.freeze``).
"""

from __future__ import annotations

import gc

YOUNG = 50_000
"""Objects made between two young collections (CPython's default is 2,000)."""


def tune() -> None:
    """Set this process's collector for carrying segments, once: a process that runs groups one
    after another (tests, a bench) collects and freezes at the first."""
    young, middle, old = gc.get_threshold()
    if young == YOUNG:
        return
    gc.set_threshold(YOUNG, middle, old)
    gc.collect()
    gc.freeze()
