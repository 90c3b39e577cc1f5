"""The chaos job's per-segment code: identity, paced so the job runs long enough to be killed
several times. The pace is the workload's (ONYX_TEST_PACE seconds per hundred events), not a
wait for anything."""

from __future__ import annotations

import os
import time
from typing import Any

PACE = float(os.environ.get("ONYX_TEST_PACE", "0"))


def pace(segment: dict[str, Any]) -> dict[str, Any]:
    if PACE and segment["ts"] % 100 == 0:
        time.sleep(PACE)
    return segment
