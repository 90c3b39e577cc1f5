"""Whether a peer group is ready to take work: joined to the ring, with its data plane up.

One pure reading of the group's current incarnation answers both the ``/readyz`` endpoint and
what systemd is told, so the two never disagree. A group between incarnations (not started yet,
or rejoining after its session was lost) is not ready; neither is one whose session is gone, one
that is leaving (the log's graceful leave, or at once), one whose data plane is closed, or a
member with a worker process that has not said it is ready (starting, or waiting to be started
again after failing to: peer.cluster.member), as that worker's peers are out meanwhile. The
reason names each such worker.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Protocol

from peer.log.replica import Replica


class SwitchboardView(Protocol):
    @property
    def up(self) -> bool: ...


class GroupView(Protocol):
    """What readiness reads off an incarnation (peer.cluster.group.Incarnation)."""

    @property
    def id(self) -> str: ...
    @property
    def replica(self) -> Replica: ...
    @property
    def lost(self) -> threading.Event: ...
    @property
    def ended(self) -> str | None: ...
    @property
    def leave_position(self) -> int | None: ...
    @property
    def switchboard(self) -> SwitchboardView: ...

    def workers_not_ready(self) -> tuple[str, ...]:
        """Why each of its worker processes that is not ready is not (none without workers)."""
        ...


@dataclass(frozen=True)
class Readiness:
    """``state`` is ready, starting, joining, lost, rejoining, leaving, "data plane down" or
    "workers not ready"; ``reason`` is the one line an operator reads."""

    ready: bool
    state: str
    reason: str

    def to_json(self) -> dict[str, object]:
        return {"ready": self.ready, "state": self.state, "reason": self.reason}


def readiness(group: GroupView | None) -> Readiness:
    """The readiness of ``group``, the current incarnation of a peer group (None between two)."""
    if group is None:
        return Readiness(False, "starting", "the group is starting (or rejoining)")
    name = f"group {group.id}"
    if group.lost.is_set() or group.ended == "lost":
        return Readiness(False, "lost", f"{name}: its ZooKeeper session was lost; rejoining")
    if group.ended == "restart":
        return Readiness(False, "rejoining", f"{name} was removed from the cluster; rejoining")
    if group.leave_position is not None or group.ended is not None or _departing(group):
        return Readiness(False, "leaving", f"{name} is leaving the ring")
    if group.id not in group.replica.groups:
        return Readiness(False, "joining", f"{name} has not joined the ring yet")
    if not group.switchboard.up:
        return Readiness(False, "data plane down", f"{name}: its data plane is closed")
    waiting = group.workers_not_ready()
    if waiting:
        return Readiness(False, "workers not ready", f"{name}: {'; '.join(waiting)}")
    return Readiness(True, "ready", f"{name} has joined the ring")


def _departing(group: GroupView) -> bool:
    """Leaving or exiting in the log: handing its work over, it takes no more."""
    return group.id in group.replica.leaving or group.id in group.replica.exiting
