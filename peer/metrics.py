"""What a peer group counts, as Prometheus metrics: the group serves them, and ``onyx run``
reads them in-process to show a job's progress.

Names follow Prometheus conventions: the ``onyx_`` prefix, base units, ``_total`` on counters
(the client adds it), and labels of low cardinality only (job ids and task names, never segment
values).
"""

from __future__ import annotations

from prometheus_client import REGISTRY, Counter

SEGMENTS_IN = Counter(
    "onyx_task_segments_in",
    "Segments a task's peers in this group took in: polled by an input, received by others",
    ["job", "task"],
)
SEGMENTS_OUT = Counter(
    "onyx_task_segments_out",
    "Segments a task's peers in this group sent on, or wrote out for an output",
    ["job", "task"],
)


def segments_in(job: str, task: str) -> float:
    """How many segments ``task`` of ``job`` has taken in, in this process."""
    value = REGISTRY.get_sample_value("onyx_task_segments_in_total", {"job": job, "task": task})
    return value or 0.0
