"""Which pulses a peer group must watch, as a pure function of the replica.

Watches are level-triggered: after every entry the group compares this set with the watches it
holds and adds or drops the difference, so no entry kind has to remember to move a watch, and
a watch on a group that is already gone fails at once, which is what closes runs of
simultaneous deaths transitively.
"""

from __future__ import annotations

from peer.log.replica import Replica


def watch_targets(replica: Replica, group: str) -> frozenset[str]:
    """A joined group watches its ring successor and the joiner it is stitching in. A joiner
    watches its future watcher while prepared (so a watcher that dies before notifying cannot
    strand it) and, once accepted, the group it will watch after joining."""
    targets: set[str | None]
    if group in replica.groups:
        targets = {
            replica.pairs.get(group),
            replica.prepared.get(group),
            replica.accepted.get(group),
        }
    elif group in replica.prepared.values():
        targets = {next(w for w, j in replica.prepared.items() if j == group)}
    elif group in replica.accepted.values():
        watcher = next(w for w, j in replica.accepted.items() if j == group)
        targets = {replica.pairs.get(watcher, watcher)}
    else:
        targets = set()
    return frozenset(t for t in targets if t is not None and t != group)
