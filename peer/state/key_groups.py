"""Key groups: the units a keyed task's keys are split into, so that state is kept, snapshotted,
restored and moved per key group rather than per key or per slot.

A keyed task (one with ``group_by_key`` or ``group_by_fn``) has a maximum parallelism M, fixed
for the life of its job and of every job resumed from it: the most slots it can ever run on.
Each key hashes to one of M key groups, ``key_hash(key) % M``, and slot i of n owns the
contiguous range of key groups ``[ceil(i*M/n), ceil((i+1)*M/n))``. So every peer routes a key
to the same slot, a slot's state is the union of its key groups', and a change from n to n'
slots moves whole key groups: a slot keeps the part of its range it still owns and gains the
rest from the slots that held it. With M = 128, 2 slots own 64 groups each and 3 own 43, 43 and
42; going from 2 to 3, the third slot takes 21 groups from the first and 21 from the second.

The hash is crc32 of the key's canonical JSON (never Python's ``hash``, salted per process), the
text window state holds the key under, so it is the same on every peer and across restarts.
"""

from __future__ import annotations

import reprlib
import zlib
from typing import Any

from peer.job.values import canonical
from peer.values.columnar import SchemaViolation


def key_hash(key: Any) -> int:
    """crc32 of the key's canonical text: the same on every peer, and the text window state
    holds the key under."""
    return _crc(_text(key))


def key_group(key: Any, max_parallelism: int) -> int:
    """The key group ``key`` belongs to."""
    return key_hash(key) % max_parallelism


def held_under(key: Any, max_parallelism: int) -> tuple[str, int]:
    """The canonical text state holds ``key`` under, and its key group: both from one
    encoding of the key."""
    text = _text(key)
    return text, key_group_of(text, max_parallelism)


def key_group_of(text: str, max_parallelism: int) -> int:
    """The key group of the key whose canonical text is ``text``."""
    return _crc(text) % max_parallelism


def _text(key: Any) -> str:
    """The key's canonical text; a SchemaViolation naming the key for one JSON cannot hold,
    which therefore has no key group."""
    try:
        return canonical(key)
    except (TypeError, ValueError) as e:
        raise SchemaViolation(
            f"group key {reprlib.repr(key)} has no key group: a group key is a JSON value (a "
            f"number, string, boolean or null, or a list or map of them): {e}"
        ) from None


def _crc(text: str) -> int:
    return zlib.crc32(text.encode())


def owner(group: int, max_parallelism: int, slots: int) -> int:
    """The slot of ``slots`` that owns key group ``group``."""
    return group * slots // max_parallelism


def groups_of(slot: int, slots: int, max_parallelism: int) -> range:
    """The key groups slot ``slot`` of ``slots`` owns: a contiguous range, empty for none."""
    return range(-(-slot * max_parallelism // slots), -(-(slot + 1) * max_parallelism // slots))


def overlap(a: range, b: range) -> range:
    """The key groups two contiguous ranges of them share (empty: none)."""
    start = max(a.start, b.start)
    return range(start, max(start, min(a.stop, b.stop)))


def heir(slot: int, slots: int, new_slots: int, max_parallelism: int) -> int:
    """The slot, of ``new_slots``, that owns the most of the key groups slot ``slot`` of
    ``slots`` owned (the lower one on a tie): where that slot's state is best kept when the
    task runs on ``new_slots`` instead."""
    held = groups_of(slot, slots, max_parallelism)
    first = owner(held.start, max_parallelism, new_slots)
    last = owner(held.stop - 1, max_parallelism, new_slots)

    def share(new: int) -> tuple[int, int]:
        return len(overlap(groups_of(new, new_slots, max_parallelism), held)), -new

    return max(range(first, last + 1), key=share)
