"""Per-key versions: the log position of the entry that last changed each key of the replica.

A key changed when its value did. Identity is checked first, which is what makes the check
cheap: an entry that leaves a key alone hands the very same collection on. A key rebuilt with
an equal value has not changed, so whether it is stamped never depends on how a kind built its
result, only on values, and every member stamps alike.

Applying one entry has two parts, the kind's own change and then the allocation's
(peer.log.allocation); each part stamps the keys it changed, at the entry's position. Splitting
them is what lets the allocation land later (peer.log.pipeline) and still stamp exactly what the
sequential apply stamps.
"""

from __future__ import annotations

from collections.abc import Iterable

from pyrsistent import PMap

from peer.log.replica import KEYS, Replica


def changed_keys(old: Replica, new: Replica, keys: Iterable[str] = KEYS) -> list[str]:
    """The keys among ``keys`` whose values differ between ``old`` and ``new``, sorted."""
    return sorted(k for k in keys if not _same(getattr(old, k), getattr(new, k)))


def _same(a: object, b: object) -> bool:
    return a is b or a == b


def stamped(
    versions: PMap, old: Replica, new: Replica, position: int, keys: Iterable[str] = KEYS
) -> PMap:
    """``versions`` with every key of ``keys`` that changed from ``old`` to ``new`` stamped
    with ``position``."""
    changed = changed_keys(old, new, keys)
    if not changed:
        return versions
    evolver = versions.evolver()
    for key in changed:
        evolver[key] = position
    return evolver.persistent()
