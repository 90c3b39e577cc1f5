"""The chaos job's per-segment code: identity, paced so the job runs long enough to be killed
several times. The pace is the workload's (ONYX_TEST_PACE seconds per hundred events), not a
wait for anything."""

from __future__ import annotations

import itertools
import os
import time
from typing import Any

import pyarrow as pa

from examples.clickstream.pipeline import view
from peer import context

PACE = float(os.environ.get("ONYX_TEST_PACE", "0"))


def pace(segment: dict[str, Any]) -> dict[str, Any]:
    if PACE and segment["ts"] % 100 == 0:
        time.sleep(PACE)
    return segment


_views = itertools.count()


def pace_view(segment: dict[str, Any]) -> dict[str, Any]:
    """The clickstream's per-view step, paced the same way: every hundredth view."""
    if PACE and next(_views) % 100 == 0:
        time.sleep(PACE)
    return segment


def pace_views(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The clickstream's visits step (an Arrow fn), paced the same way: PACE per hundred views."""
    if PACE:
        time.sleep(PACE * batch.num_rows / 100)
    return view(batch)


def draw(segment: dict[str, Any]) -> dict[str, Any]:
    """The segment with a random draw through the task's context: a determinant a replay must
    give again, so a record sent before a takeover and after it are the same."""
    return {**segment, "draw": context.random()}
