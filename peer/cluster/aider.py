"""The aider's side of join direct, as pure decisions: the wiring only does the I/O.

A joiner asks a live member to aid it. The aider decides on its own replica (``decide``): it
either writes one join-direct entry (after adding a watch on the joiner and telling it whom to
watch), or answers that the joiner has joined already, or refuses for now. Once it has read its
own entry back it answers the joiner (``answer``), sending its replica as of the entry when the
joiner is in, so the joiner applies only what follows. The entry's own rule
(peer.log.entries.join_direct.refusal) is the one the decision follows, so an aider writes only
entries that stitch the joiner in unless the log moved on meanwhile.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from peer.log.entries.join import NOTIFY_JOIN
from peer.log.entries.join_direct import JOIN_DIRECT, refusal
from peer.log.entry import Entry, Transition
from peer.log.replica import Replica


@dataclass(frozen=True, slots=True)
class JoinRequest:
    """What a joiner sends its aider: its id and what to announce with it. ``peer_sites``
    gives the peers that listen apart from the joiner's site (a member's workers) their own."""

    joiner: str
    peers: tuple[str, ...] = ()
    site: str | None = None
    tags: tuple[str, ...] = ()
    peer_sites: tuple[tuple[str, str], ...] = ()
    rumors: bool = False
    """Whether the joiner takes the log's rumors (peer.log.epidemic)."""

    def entry(self, aider: str) -> Entry:
        """The join-direct that ``aider`` writes for this request."""
        extra: dict[str, object] = {}
        if self.peers:
            extra["peers"] = sorted(set(self.peers))
        if self.site:
            extra["site"] = self.site
        if self.tags:
            extra["tags"] = sorted(set(self.tags))
        if self.peer_sites:
            extra["peer_sites"] = dict(sorted(self.peer_sites))
        if self.rumors:
            extra["rumors"] = True
        return JOIN_DIRECT.entry(joiner=self.joiner, aider=aider, **extra)


@dataclass(frozen=True, slots=True)
class Decision:
    """What an aider does with one request, decided on its own replica.

    Exactly one holds: ``entry`` is set (watch the joiner, tell it to watch ``target``, write
    the entry, and once it is applied send the joiner the replica as of it); ``joined`` (the
    joiner is in the ring already: send it the replica, write nothing); or ``refused`` says why
    not now (the joiner asks again, this aider later or another), and ``left`` that it never
    will: the joiner's id has left the cluster (reported dead before it heard it had joined), so
    its group restarts under a new id instead of asking again.
    """

    entry: Entry | None = None
    target: str | None = None
    joined: bool = False
    refused: str | None = None
    left: bool = False


def decide(
    replica: Replica, aider: str, request: JoinRequest, aiding: Sequence[str] = ()
) -> Decision:
    """Whether ``aider`` can stitch the request's joiner in now, given its replica and the
    joiners it is stitching already (``aiding``: requests whose entries it has written or is
    about to and has not yet read back). An aider stitches one joiner at a time, as its watch on
    its successor can move once per entry; a joiner that asks again while its own entry is on the
    way is refused too, and the entry already written decides."""
    joiner = request.joiner
    if joiner in replica.groups:
        return Decision(joined=True)
    reason = refusal(replica, joiner, aider)
    if reason is not None:
        return Decision(refused=reason, left=joiner in replica.left)
    if aiding:
        return Decision(refused=f"aider {aider} is stitching in {sorted(aiding)[0]} already")
    return Decision(entry=request.entry(aider), target=replica.pairs.get(aider, aider))


def answer(t: Transition) -> Decision:
    """What the aider tells its joiner once it has read its own join-direct back: joined (send
    the replica as of the entry, ``t.new``), or why the entry changed nothing."""
    joiner, aider = t.entry.args["joiner"], t.entry.args["aider"]
    if joiner in t.new.groups:
        return Decision(joined=True)
    reason = refusal(t.old, joiner, aider) or "the entry was refused as malformed"
    return Decision(refused=reason, left=joiner in t.new.left)


def owed(replica: Replica, joiner: str) -> tuple[Entry, ...]:
    """What a joiner handed ``replica`` must write for entries it never applied itself.

    A joiner whose aider died before answering is in the ring but reads nothing until another
    aider hands it a replica later than its join. Meanwhile a classic prepare may have chosen it
    as the watcher of another joiner: the notify that prepare asked of it is still owed, or that
    join would wait for ever. Watches need nothing (they follow the replica), and a notify that
    turns out stale changes nothing.
    """
    stitching = replica.prepared.get(joiner)
    if stitching is None:
        return ()
    return (NOTIFY_JOIN.entry(joiner=stitching, watcher=joiner),)
