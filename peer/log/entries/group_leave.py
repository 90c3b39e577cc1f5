"""group-leave-cluster: a peer group is gone, by its own graceful leave, removed by the
membership leader after exiting, or reported dead (down).

The group that watched it now watches what it watched, which closes the ring; when that next
group is dead too, its new watcher finds the pulse missing and reports it in turn, so runs of
simultaneous deaths close transitively. Joins that depended on the group are aborted.
"""

from __future__ import annotations

from collections.abc import Iterable

from pyrsistent import PMap, pmap

from peer.log.entries.join import ABORT_JOIN
from peer.log.entry import Diff, Effects, Entry, EntryKind, Transition
from peer.log.replica import Replica

_CHANGED = (
    "groups", "pairs", "prepared", "accepted", "aborted", "left", "leaving", "exiting",
    "removed", "group_peers", "sites", "peer_sites", "group_tags", "rumor_takers", "short_ids",
)  # fmt: skip
"""What a departure reads and changes: the group leaves every key that names it."""


def _known(replica: Replica, group: str) -> bool:
    return group in replica.groups or group in replica.group_peers or group in replica.joining()


def _apply(replica: Replica, entry: Entry) -> Replica:
    group = entry.args["id"]
    if not _known(replica, group):
        return replica
    pairs = replica.pairs
    watcher, target = replica.watcher_of(group), pairs.get(group)
    pairs = pairs.discard(group)
    if watcher is not None:
        pairs = pairs.set(watcher, target) if watcher != target else pairs.discard(watcher)
    stranded = {replica.prepared.get(group), replica.accepted.get(group)} - {None}
    prepared, accepted = _dropped(replica.prepared, group), _dropped(replica.accepted, group)
    return replica.evolve(
        groups=replica.groups.discard(group),
        pairs=pairs,
        prepared=prepared,
        accepted=accepted,
        aborted=replica.aborted.update(stranded).discard(group),
        left=replica.left.add(group),
        leaving=replica.leaving.discard(group),
        exiting=replica.exiting.discard(group),
        removed=replica.removed.add(group) if group in replica.exiting else replica.removed,
        group_peers=replica.group_peers.discard(group),
        sites=replica.sites.discard(group),
        peer_sites=_without(replica.peer_sites, replica.group_peers.get(group, ())),
        group_tags=replica.group_tags.discard(group),
        rumor_takers=replica.rumor_takers.discard(group),
        short_ids=_without(replica.short_ids, replica.group_peers.get(group, ())),
    )


def _dropped(joins: PMap, group: str) -> PMap:
    """``joins`` without those the group is in, as watcher or as joiner; the very map when it
    is in none, so that the key keeps its version."""
    if group not in joins and group not in joins.values():
        return joins
    return pmap({w: j for w, j in joins.items() if group not in (w, j)})


def _without(short_ids: PMap, peers: Iterable[str]) -> PMap:
    evolver = short_ids.evolver()
    for peer in peers:
        if peer in evolver:  # type: ignore[operator]  # it has __contains__; its stub omits it
            del evolver[peer]
    return evolver.persistent()


def _diff(entry: Entry, old: Replica, new: Replica) -> Diff:
    if old is new:
        return None
    group = entry.args["id"]
    return {
        "left": group,
        "watcher": old.watcher_of(group),
        "target": old.pairs.get(group),
        "stranded": sorted({old.prepared.get(group), old.accepted.get(group)} - {None}),
        "exited": group in old.exiting,
    }


def _reactions(t: Transition, group: str) -> tuple[Entry, ...]:
    if t.diff is not None and group in t.diff["stranded"]:
        return (ABORT_JOIN.entry(id=group),)
    return ()


def _side_effects(t: Transition, group: str, effects: Effects) -> None:
    """A group that reads of its own departure without having asked for it was presumed dead
    (its session expired, or a watcher lost sight of it): it must not go on under that id. One
    that had exited is removed as it asked, and ends."""
    if t.diff is None or group != t.diff["left"]:
        return
    if t.diff["exited"]:
        effects.end_group()
    else:
        effects.restart_group()


GROUP_LEAVE = EntryKind(
    name="group-leave-cluster",
    args={"id": str},
    apply=_apply,
    diff=_diff,
    reactions=_reactions,
    side_effects=_side_effects,
    reads=frozenset(_CHANGED),
    writes=frozenset(_CHANGED),
)

KINDS = (GROUP_LEAVE,)
