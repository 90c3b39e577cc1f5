"""What a peer group sends and receives frames through: the Aeron transport
(peer.messaging.aeron), or the in-memory one of a local cluster (peer.cluster.local).

One transport carries every protocol a group speaks with the others; the group's switchboard
(peer.cluster.switchboard) hands each frame that comes in to its protocol's owner.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol


class Transport(Protocol):
    address: str
    max_frame: int
    """The largest frame ``offer`` takes: larger ones are sent in pieces."""

    def offer(self, address: str, frame: bytes) -> bool: ...

    def poll(self, handler: Callable[[bytes], None], limit: int = 64) -> int: ...

    def forget(self, address: str) -> None: ...

    def beacon(self) -> Any:
        """An ``offer(address, frame)``, a ``forget(address)`` and a ``max_frame`` for the
        membership thread."""
