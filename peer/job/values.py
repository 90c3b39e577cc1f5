"""Plain values, as jobs, snapshots and log records hold them (JSON-like data): which of them are
whole numbers, and the one canonical text of a value.

The canonical text is what a group key is held under in window state and what routing hashes,
so both must make it the same way on every peer and across restarts: compact JSON with sorted
keys, which does not depend on a dict's insertion order or the process.
"""

from __future__ import annotations

import json
from typing import Any


def is_int(value: object) -> bool:
    """An int and not a bool (which Python counts as an int, and JSON does not)."""
    return isinstance(value, int) and not isinstance(value, bool)


def canonical(value: Any) -> str:
    """``value`` as compact JSON with sorted keys."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))
