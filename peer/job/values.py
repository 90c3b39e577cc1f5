"""Plain values, as jobs, snapshots and log records hold them (JSON-like data): which of them are
whole numbers, and the one canonical text of a value.

The canonical text is what a group key is held under in window state and what routing hashes,
so both must make it the same way on every peer and across restarts: compact JSON with sorted
keys, which does not depend on a dict's insertion order or the process.
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring_ascii
from typing import Any

_COMPACT = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode
"""One encoder for every call: ``json.dumps`` with these options builds one per call, which
costs more than the encoding of a small key."""


def is_int(value: object) -> bool:
    """An int and not a bool (which Python counts as an int, and JSON does not)."""
    return isinstance(value, int) and not isinstance(value, bool)


def canonical(value: Any) -> str:
    """``value`` as compact JSON with sorted keys. A key is canonicalized for every segment a
    keyed task routes and holds state for, so the common keys, ints and strings, take the
    encoder's own short paths straight."""
    kind = type(value)
    if kind is str:
        return encode_basestring_ascii(value)
    if kind is int:
        return int.__repr__(value)
    return _COMPACT(value)
