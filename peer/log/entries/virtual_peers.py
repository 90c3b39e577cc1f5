"""Virtual peers come and go within their group.

add-virtual-peer announces one; it stays orphaned until its group has joined the ring, so a
group that aborts its join never has peers counted as workers. It also carries the group's
site (where it listens for segments), tags and whether it takes the log's rumors
(``rumors``), and gives the peer its short id for the wire.
A peer that listens elsewhere than its group (one of a member's worker processes) carries its
own ``peer_site`` as well.
leave-cluster removes one peer while its group lives on: the data plane's heartbeats report
peers that stop answering that way.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyrsistent import PMap, pset

from peer.log.entry import Diff, Effects, Entry, EntryKind, InvalidEntry, Transition
from peer.log.replica import Replica


def _apply_add(replica: Replica, entry: Entry) -> Replica:
    peer, group = entry.args["id"], entry.args["group"]
    tags = entry.args.get("tags", [])
    check_strings("add-virtual-peer", "tags", tags)
    if group in replica.left:
        return replica
    rumors = entry.args.get("rumors", False)
    announced = announce(replica, group, [peer], entry.args.get("site"), tags, rumors=rumors)
    site = entry.args.get("peer_site")
    return own_sites(announced, replica, group, {peer: site} if site else {})


def own_sites(announced: Replica, before: Replica, group: str, sites: Mapping[str, str]) -> Replica:
    """Record the own site of each peer in ``sites`` that ``announced`` newly announced (it
    was not among the group's peers in ``before``) and that listens elsewhere than its group;
    the very replica when there is none."""
    known = before.group_peers.get(group, pset())
    fresh = announced.group_peers.get(group, pset())
    own = {
        peer: site
        for peer, site in sorted(sites.items())
        if peer in fresh and peer not in known and site != announced.sites.get(group)
    }
    if announced is before or not own:
        return announced
    return announced.evolve(peer_sites=announced.peer_sites.update(own))


def check_strings(kind: str, name: str, values: list) -> None:
    """Refuse a list argument unless it holds only non-empty strings."""
    if not all(isinstance(v, str) and v for v in values):
        raise InvalidEntry(f"{kind}: {name} must be non-empty strings, got {values!r}")


def announce(
    replica: Replica,
    group: str,
    peers: list[str],
    site: str | None,
    tags: list[str],
    *,
    rumors: bool = False,
) -> Replica:
    """The group's new virtual peers, each with its short id (given in sorted order), the
    group's site and tags when given, and the group among the rumor takers when it ``rumors``.
    Peers the group has announced already change nothing: with none new, the very replica given
    is returned."""
    known = replica.group_peers.get(group, pset())
    new = [p for p in sorted(set(peers)) if p not in known]
    if not new:
        return replica
    short_ids = replica.short_ids.evolver()
    for offset, peer in enumerate(new):
        short_ids[peer] = replica.next_short_id + offset
    tagged = tuple(sorted(set(tags)))
    return replica.evolve(
        group_peers=replica.group_peers.set(group, known.update(new)),
        sites=_updated(replica.sites, group, site) if site else replica.sites,
        group_tags=_updated(replica.group_tags, group, tagged) if tags else replica.group_tags,
        rumor_takers=replica.rumor_takers.add(group) if rumors else replica.rumor_takers,
        short_ids=short_ids.persistent(),
        next_short_id=replica.next_short_id + len(new),
    )


ANNOUNCED = frozenset(
    {"group_peers", "sites", "group_tags", "rumor_takers", "short_ids", "next_short_id"}
)
"""The keys ``announce`` reads and writes."""


def _updated(values: PMap, group: str, value: object) -> PMap:
    """``values`` with the group's ``value``; the very map when it holds that value already,
    so that the key keeps its version."""
    return values if values.get(group) == value else values.set(group, value)


def _diff_peer(entry: Entry, old: Replica, new: Replica) -> Diff:
    return None if old is new else {"peer": entry.args["id"], "group": entry.args["group"]}


ADD_VIRTUAL_PEER = EntryKind(
    name="add-virtual-peer",
    args={"id": str, "group": str},
    optional={"site": str, "peer_site": str, "tags": list, "rumors": bool},
    apply=_apply_add,
    diff=_diff_peer,
    reads=ANNOUNCED | {"left", "peer_sites"},
    writes=ANNOUNCED | {"peer_sites"},
)


def _apply_leave(replica: Replica, entry: Entry) -> Replica:
    peer, group = entry.args["id"], entry.args["group"]
    peers = replica.group_peers.get(group)
    if peers is None or peer not in peers:
        return replica
    return replica.evolve(
        group_peers=replica.group_peers.set(group, peers.remove(peer)),
        short_ids=replica.short_ids.discard(peer),
        peer_sites=replica.peer_sites.discard(peer),
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
    reads=frozenset({"group_peers", "short_ids", "peer_sites"}),
    writes=frozenset({"group_peers", "short_ids", "peer_sites"}),
)

KINDS = (ADD_VIRTUAL_PEER, LEAVE_CLUSTER)
