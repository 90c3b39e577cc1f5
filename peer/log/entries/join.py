"""The 3-phase join that stitches a peer group into the ring of watches.

prepare-join-cluster (the joiner J asks; a watcher W is chosen deterministically), then
notify-join-cluster (W, now watching J, tells J whom to watch), then accept-join-cluster (J,
now watching W's target, completes the join; W drops its old watch). A join cut short, for
want of a free watcher or because its watcher left, is aborted with abort-join-cluster and J
tries again after a randomized back-off. Exactly one retry follows each cancelled attempt: a
notify or accept that finds its attempt already cancelled changes nothing and aborts nothing,
since whatever cancelled it has sent the abort that restarts it (two retries of one joiner
would cancel each other's attempts for ever).
Which groups watch what at every moment is derived from the replica (peer.cluster.ring), so
these kinds only change the replica and say who reacts.
"""

from __future__ import annotations

from peer.log.entry import Diff, Effects, Entry, EntryKind, Transition
from peer.log.replica import Replica


def _joined(replica: Replica, group: str) -> bool:
    return group in replica.groups


def _repeated(replica: Replica, joiner: str) -> bool:
    """A prepare from a group that has joined, is joining, or has left changes nothing."""
    return _joined(replica, joiner) or joiner in replica.joining() or joiner in replica.left


def disallowed_watchers(replica: Replica) -> set[str]:
    """Groups busy with a join: each watcher stitches one joiner at a time, and a watcher
    that is itself being bypassed by a prepared joiner's future watch must not move."""
    busy = set(replica.prepared) | set(replica.accepted)
    inverse = {t: w for w, t in replica.pairs.items()}
    return busy | {inverse[w] for w in replica.prepared if w in inverse}


def _apply_prepare(replica: Replica, entry: Entry) -> Replica:
    joiner = entry.args["joiner"]
    if _repeated(replica, joiner):
        return replica
    if not replica.groups:
        return replica.evolve(
            groups=replica.groups.add(joiner), aborted=replica.aborted.discard(joiner)
        )
    candidates = sorted(set(replica.groups) - disallowed_watchers(replica) - {joiner})
    if not candidates:
        return replica.evolve(aborted=replica.aborted.add(joiner))
    watcher = candidates[entry.position % len(candidates)]
    return replica.evolve(
        prepared=replica.prepared.set(watcher, joiner), aborted=replica.aborted.discard(joiner)
    )


def _diff_prepare(entry: Entry, old: Replica, new: Replica) -> Diff:
    joiner = entry.args["joiner"]
    if _joined(new, joiner) and not _joined(old, joiner):
        return {"instant_join": joiner}
    added = {w: j for w, j in new.prepared.items() if old.prepared.get(w) != j}
    if added:
        ((watcher, joiner),) = added.items()
        return {"watcher": watcher, "joiner": joiner}
    return None


def _refused(t: Transition) -> bool:
    """The prepare found no free watcher (as opposed to repeating a join already made)."""
    return t.diff is None and not _repeated(t.old, t.entry.args["joiner"])


def _react_prepare(t: Transition, group: str) -> tuple[Entry, ...]:
    if group == t.entry.args["joiner"] and _refused(t):
        return (ABORT_JOIN.entry(id=group),)
    if t.diff and t.diff.get("watcher") == group:
        return (NOTIFY_JOIN.entry(joiner=t.diff["joiner"], watcher=group),)
    return ()


def _effects_prepare(t: Transition, group: str, effects: Effects) -> None:
    """A joiner refused for want of free watchers checks whether the busy ones still live:
    after a total failure they may all be dead, and only the joiner can notice."""
    if group == t.entry.args["joiner"] and _refused(t):
        for busy in sorted(disallowed_watchers(t.new)):
            effects.report_if_dead(busy)


PREPARE_JOIN = EntryKind(
    name="prepare-join-cluster",
    args={"joiner": str},
    apply=_apply_prepare,
    diff=_diff_prepare,
    reactions=_react_prepare,
    side_effects=_effects_prepare,
    reads=frozenset({"groups", "left", "prepared", "accepted", "pairs", "aborted"}),
    writes=frozenset({"groups", "aborted", "prepared"}),
)


def _apply_notify(replica: Replica, entry: Entry) -> Replica:
    joiner, watcher = entry.args["joiner"], entry.args["watcher"]
    if replica.prepared.get(watcher) != joiner or _joined(replica, joiner):
        return replica
    return replica.evolve(
        prepared=replica.prepared.discard(watcher), accepted=replica.accepted.set(watcher, joiner)
    )


def _diff_stitch(entry: Entry, old: Replica, new: Replica) -> Diff:
    if old is new:
        return None
    watcher = entry.args["watcher"]
    return {
        "joiner": entry.args["joiner"],
        "watcher": watcher,
        "target": old.pairs.get(watcher, watcher),
    }


def _react_notify(t: Transition, group: str) -> tuple[Entry, ...]:
    if t.diff is None or group != t.diff["joiner"]:
        return ()
    return (ACCEPT_JOIN.entry(joiner=group, watcher=t.diff["watcher"]),)


NOTIFY_JOIN = EntryKind(
    name="notify-join-cluster",
    args={"joiner": str, "watcher": str},
    apply=_apply_notify,
    diff=_diff_stitch,
    reactions=_react_notify,
    reads=frozenset({"prepared", "accepted", "groups", "pairs"}),
    writes=frozenset({"prepared", "accepted"}),
)


def _apply_accept(replica: Replica, entry: Entry) -> Replica:
    joiner, watcher = entry.args["joiner"], entry.args["watcher"]
    target = replica.pairs.get(watcher, watcher)
    if replica.accepted.get(watcher) != joiner or _joined(replica, joiner):
        return replica
    if target not in replica.groups:
        return replica
    return replica.evolve(
        groups=replica.groups.add(joiner),
        pairs=replica.pairs.set(watcher, joiner).set(joiner, target),
        accepted=replica.accepted.discard(watcher),
        aborted=replica.aborted.discard(joiner),
    )


ACCEPT_JOIN = EntryKind(
    name="accept-join-cluster",
    args={"joiner": str, "watcher": str},
    apply=_apply_accept,
    diff=_diff_stitch,
    reads=frozenset({"pairs", "accepted", "groups", "aborted"}),
    writes=frozenset({"groups", "pairs", "accepted", "aborted"}),
)


def _apply_abort(replica: Replica, entry: Entry) -> Replica:
    group = entry.args["id"]
    if _joined(replica, group) or group in replica.left:
        return replica
    return replica.evolve(
        prepared=_without_value(replica.prepared, group),
        accepted=_without_value(replica.accepted, group),
        aborted=replica.aborted.add(group),
    )


def _without_value(joins, group: str):
    return joins.discard(next((w for w, j in joins.items() if j == group), None))


def _diff_abort(entry: Entry, old: Replica, new: Replica) -> Diff:
    group = entry.args["id"]
    return None if _joined(old, group) or group in old.left else {"aborted": group}


def _react_abort(t: Transition, group: str) -> tuple[Entry, ...]:
    if t.diff is not None and group == t.diff["aborted"]:
        return (PREPARE_JOIN.entry(joiner=group),)
    return ()


def _effects_abort(t: Transition, group: str, effects: Effects) -> None:
    if t.diff is not None and group == t.diff["aborted"]:
        effects.back_off()


ABORT_JOIN = EntryKind(
    name="abort-join-cluster",
    args={"id": str},
    apply=_apply_abort,
    diff=_diff_abort,
    reactions=_react_abort,
    side_effects=_effects_abort,
    reads=frozenset({"groups", "left", "prepared", "accepted", "aborted"}),
    writes=frozenset({"prepared", "accepted", "aborted"}),
)

KINDS = (PREPARE_JOIN, NOTIFY_JOIN, ACCEPT_JOIN, ABORT_JOIN)
