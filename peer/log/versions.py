"""Per-key versions: the log position of the entry that last changed each key of the replica.

A key changed when the entry handed on another object for it. Kinds hand a key they leave
unchanged on as the very object they were given, and never rebuild a key to an equal value (a
property test holds every kind to it), so identity tells a change from none in constant time,
and every member, whatever its objects, stamps alike.

Applying one entry has two parts, the kind's own change and then the allocation's
(peer.log.allocation); each part stamps the keys it changed, at the entry's position. Splitting
them is what lets the allocation land later (peer.log.pipeline) and still stamp exactly what the
sequential apply stamps.
"""

from __future__ import annotations

from collections.abc import Iterable

from peer.log.replica import EMPTY_VERSION, KEY_INDEX, KEY_ORDER, KEYS, Replica


def changed_keys(old: Replica, new: Replica, keys: Iterable[str] = KEYS) -> list[str]:
    """The keys among ``keys`` that ``new`` holds other objects for than ``old``."""
    return [k for k in keys if getattr(old, k) is not getattr(new, k)]


def stamped(
    versions: tuple[int, ...],
    old: Replica,
    new: Replica,
    position: int,
    keys: Iterable[str] = KEYS,
) -> tuple[int, ...]:
    """``versions`` (as ``Replica.key_versions``) with every key of ``keys`` that changed from
    ``old`` to ``new`` stamped with ``position``."""
    changed = changed_keys(old, new, keys)
    if not changed:
        return versions
    return taken(versions, dict.fromkeys(changed, position))


def taken(versions: tuple[int, ...], given: dict[str, int]) -> tuple[int, ...]:
    """``versions`` with the keys of ``given`` at the versions it gives."""
    out = list(versions) if versions else [EMPTY_VERSION] * len(KEY_ORDER)
    for key, version in given.items():
        out[KEY_INDEX[key]] = version
    return tuple(out)
