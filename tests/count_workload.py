"""The workload the connectors' count jobs share: keyed events in event-time order, and the
count of each user's events per fixed window of 1,000, computed here: the oracle of every
connector's count job."""

from __future__ import annotations

import collections
import json
from typing import Any

USERS = 13


def events(count: int) -> list[dict[str, Any]]:
    return [{"user": f"u{(i * 7) % USERS}", "ts": i} for i in range(count)]


def expected_counts(count: int) -> list[str]:
    """The windowed counts, computed here: the oracle of the count job."""
    counts = collections.Counter((e["user"], e["ts"] // 1000) for e in events(count))
    return sorted(
        json.dumps({"window": "w", "key": user, "start": w * 1000, "end": (w + 1) * 1000,
                    "value": n}, sort_keys=True)
        for (user, w), n in counts.items()
    )  # fmt: skip
