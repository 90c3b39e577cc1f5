"""join-direct: one entry stitches a new group into the ring, right after the group that aided it.

In the join-direct mode a new group (the joiner) asks a live member (the aider) over a side
channel. The aider does the classic join's three steps locally, where nobody else needs to see
them: it adds a watch on the joiner, tells the joiner whom to watch (its own ring successor, or
itself when it is alone), and writes this one entry; once the entry is applied the aider watches
the joiner and drops its old watch, since watches follow the replica (peer.cluster.ring). The
entry may carry the joiner's virtual peers, site and tags, so that a join costs one write to the
log however many peers the joiner runs; peers it announced before with add-virtual-peer count
too. A joiner whose peers listen apart from it (a member's worker processes, each at a site of
its own) has the entry carry ``peer_sites`` too, peer → site, as add-virtual-peer's
``peer_site`` does one peer at a time; an entry without it (every entry written before it
existed) puts every peer at the joiner's site. However they were announced, the peers become
active the moment the joiner is among the groups, as after the classic join.

Applying the entry reads the ring as of its own position: the joiner watches whatever the aider
watches then, not what the aider told it when it decided. Watches are reconciled with the
replica after every entry, so a successor that changed in between only moves a watch.

The entry changes nothing (every group refuses it alike) when ``refusal`` names a reason, the
first of these that holds:
- the joiner has joined already (by an earlier join-direct whose reply was lost with its aider,
  or otherwise): it joins exactly once, however many aiders it asked;
- the joiner is joining by the classic protocol: that join goes on and this one gives way;
- the joiner has left: that id is gone for good, and its group comes back under a new one;
- the aider has not joined (it never did, or it has left: an aider whose group-leave-cluster
  came first aids nobody, and its joiner times out and asks another);
- the aider is leaving or exiting: it is handing its work over and will be removed, and a
  joiner stitched next to it would only have its watcher move again at once;
- the aider is the watcher of a classic join in flight (it is a key of ``prepared`` or
  ``accepted``): each watcher stitches one joiner at a time, whichever protocol asks, so a
  classic joiner's accept always finds the watcher where its notify left it.

No group writes anything in reaction. The joiner learns it has joined either from the aider's
reply (the aider's replica as of this entry, the full replica transfer) or by reading the entry
itself; a refused entry sends the joiner to ask again (peer.cluster.aider says what the aider
answers).
"""

from __future__ import annotations

from peer.log.entries.virtual_peers import ANNOUNCED, announce, check_strings, own_sites
from peer.log.entry import Diff, Entry, EntryKind, InvalidEntry
from peer.log.replica import Replica

NAME = "join-direct"


def refusal(replica: Replica, joiner: str, aider: str) -> str | None:
    """Why a join-direct of ``joiner`` aided by ``aider`` changes nothing on ``replica``, or
    None when it stitches the joiner in. The single rule both the entry and ``decide`` follow."""
    if joiner in replica.groups:
        return f"joiner {joiner} has joined already"
    if joiner in replica.joining():
        return f"joiner {joiner} is joining by the classic join"
    if joiner in replica.left:
        return f"joiner {joiner} has left the cluster: its group must come back under a new id"
    if aider not in replica.groups:
        return f"aider {aider} has not joined the cluster"
    if aider in replica.leaving or aider in replica.exiting:
        return f"aider {aider} is leaving the cluster"
    stitching = replica.prepared.get(aider) or replica.accepted.get(aider)
    if stitching is not None:
        return f"aider {aider} is stitching in {stitching} by the classic join"
    return None


def _apply(replica: Replica, entry: Entry) -> Replica:
    joiner, aider = entry.args["joiner"], entry.args["aider"]
    peers, tags = entry.args.get("peers", []), entry.args.get("tags", [])
    check_strings(NAME, "peers", peers)
    check_strings(NAME, "tags", tags)
    sites = entry.args.get("peer_sites", {})
    _check_sites(sites, peers)
    if refusal(replica, joiner, aider) is not None:
        return replica
    target = replica.pairs.get(aider, aider)
    stitched = replica.evolve(
        groups=replica.groups.add(joiner),
        pairs=replica.pairs.set(aider, joiner).set(joiner, target),
        aborted=replica.aborted.discard(joiner),
    )
    rumors = entry.args.get("rumors", False)
    announced = announce(stitched, joiner, peers, entry.args.get("site"), tags, rumors=rumors)
    return own_sites(announced, stitched, joiner, sites)


def _check_sites(sites: dict, peers: list) -> None:
    """Refuse ``peer_sites`` unless it maps peers the entry carries to non-empty sites."""
    check_strings(NAME, "peer_sites", [*sites, *sites.values()])
    stray = sorted(set(sites) - set(peers))
    if stray:
        raise InvalidEntry(f"{NAME}: peer_sites names peers the entry does not carry: {stray}")


def _diff(entry: Entry, old: Replica, new: Replica) -> Diff:
    """Who joined, who watches it now, and whom it watches: what the aider told it to."""
    if old is new:
        return None
    aider = entry.args["aider"]
    return {"joiner": entry.args["joiner"], "aider": aider, "target": old.pairs.get(aider, aider)}


_STITCHED = frozenset(
    {"groups", "prepared", "accepted", "left", "leaving", "exiting", "pairs", "aborted"}
)
"""The ring's keys that stitching a joiner in reads."""

JOIN_DIRECT = EntryKind(
    name=NAME,
    args={"joiner": str, "aider": str},
    optional={"peers": list, "site": str, "tags": list, "peer_sites": dict, "rumors": bool},
    apply=_apply,
    diff=_diff,
    reads=_STITCHED | ANNOUNCED | {"peer_sites"},
    writes=frozenset({"groups", "pairs", "aborted", "peer_sites"}) | ANNOUNCED,
)

KINDS = (JOIN_DIRECT,)
