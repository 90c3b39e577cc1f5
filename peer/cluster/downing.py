"""The one place a group writes another member down (its group-leave-cluster entry), whichever
detector saw it go.

Two detectors see a member go, and both come here:

- The membership (peer.membership) is the authority. Heartbeats with phi accrual tell a slow
  member from a silent one, gossip spreads who is unreachable, and unreachable is not down: only
  the leader downs a member, once it has been unreachable past ``auto_down_unreachable_after``
  (and removes one that has exited). A member that still holds its ZooKeeper session but cannot
  be reached (a cut link, a long pause) is downed this way, or not at all.
- ZooKeeper's pulses are the fallback. Each group watches the ephemeral pulse of the group after
  it on the ring; the pulse goes when that group's session ends, and a group whose session has
  ended is gone for good: it rejoins, if it comes back, under a new id. No judgment is needed,
  so the watcher downs it at once. This covers what the membership cannot judge: a member no
  leader ever heard from, a cluster whose only other member is the one gone, a cluster running
  with auto-down off.

Whichever comes first writes the entry; the other finds the member downed already, and this
group writes nothing more for it. Entries go out through the group's outbox, so none is written
while the group is cut off from ZooKeeper or backing off a join.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from enum import Enum

from peer.log.entries.group_leave import GROUP_LEAVE
from peer.log.entry import Entry

log = logging.getLogger(__name__)


class Cause(Enum):
    UNREACHABLE = "downs member %s, unreachable too long"
    EXITED = "removes member %s, which has exited"
    PULSE_GONE = "downs member %s: its pulse is gone (its ZooKeeper session ended)"


class Downing:
    def __init__(self, group: str, write: Callable[[Entry], None]) -> None:
        self.group, self.write = group, write
        self.downed: set[str] = set()
        """The members this identity of the group has written down."""

    def down(self, member: str, cause: Cause) -> None:
        if member in self.downed:
            return
        self.downed.add(member)
        level = logging.INFO if cause is Cause.EXITED else logging.WARNING
        log.log(level, "group %s " + cause.value, self.group, member)
        self.write(GROUP_LEAVE.entry(id=member))
