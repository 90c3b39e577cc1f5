"""Virtual peers come and go within their group.

add-virtual-peer announces one; it stays orphaned until its group has joined the ring, so a
group that aborts its join never has peers counted as workers. It also carries the group's
site (where it listens for segments) and tags, and gives the peer its short id for the wire.
leave-cluster removes one peer while its group lives on: the data plane's heartbeats report
peers that stop answering that way.
"""

from __future__ import annotations

from pyrsistent import pset

from peer.log.entry import Diff, Effects, Entry, EntryKind, InvalidEntry, Transition
from peer.log.replica import Replica


def _apply_add(replica: Replica, entry: Entry) -> Replica:
    peer, group = entry.args["id"], entry.args["group"]
    tags = entry.args.get("tags", [])
    if not all(isinstance(t, str) and t for t in tags):
        raise InvalidEntry(f"add-virtual-peer: tags must be non-empty strings, got {tags!r}")
    peers = replica.group_peers.get(group, pset())
    if group in replica.left or peer in peers:
        return replica
    site = entry.args.get("site")
    return replica.evolve(
        group_peers=replica.group_peers.set(group, peers.add(peer)),
        sites=replica.sites.set(group, site) if site else replica.sites,
        group_tags=replica.group_tags.set(group, tuple(sorted(set(tags))))
        if tags
        else replica.group_tags,
        short_ids=replica.short_ids.set(peer, replica.next_short_id),
        next_short_id=replica.next_short_id + 1,
    )


def _diff_peer(entry: Entry, old: Replica, new: Replica) -> Diff:
    return None if old is new else {"peer": entry.args["id"], "group": entry.args["group"]}


ADD_VIRTUAL_PEER = EntryKind(
    name="add-virtual-peer",
    args={"id": str, "group": str},
    optional={"site": str, "tags": list},
    apply=_apply_add,
    diff=_diff_peer,
)


def _apply_leave(replica: Replica, entry: Entry) -> Replica:
    peer, group = entry.args["id"], entry.args["group"]
    peers = replica.group_peers.get(group)
    if peers is None or peer not in peers:
        return replica
    return replica.evolve(
        group_peers=replica.group_peers.set(group, peers.remove(peer)),
        short_ids=replica.short_ids.discard(peer),
    )


def _effects_leave(t: Transition, group: str, effects: Effects) -> None:
    """The group is alive even though one of its peers was reported gone: replace the peer."""
    if t.diff is not None and t.diff["group"] == group:
        effects.restart_virtual_peer(t.diff["peer"])


LEAVE_CLUSTER = EntryKind(
    name="leave-cluster",
    args={"id": str, "group": str},
    apply=_apply_leave,
    diff=_diff_peer,
    side_effects=_effects_leave,
)

KINDS = (ADD_VIRTUAL_PEER, LEAVE_CLUSTER)
