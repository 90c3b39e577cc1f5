"""Join direct's I/O for one identity of a group: asking as a joiner, answering as an aider.

The decisions are pure (peer.cluster.aider); this does what they say over the data transport.

As a joiner (the mode ``join_direct``), the group asks its seed nodes first, then the members
one read of the pulses finds (each pulse holds its group's site), one at a time: it sends its
ask and polls for the answer until a deadline; on a refusal or no answer in time it asks the
next. ``joined`` hands it the aider's replica as of its join-direct entry, which it adopts to
read only what follows; ``left`` means its id is gone for good, so its group starts again under
a new one. With nobody to ask, or nobody having stitched it in after one round, it joins by the
classic protocol: the first member of an empty cluster does, and two that start together find
each other unjoined and fall back alike. A late ``joined`` answer still counts, from any aider.

As an aider (any joined member, whatever its modes) it decides on its replica; to stitch the
joiner in it first watches the joiner's pulse (the group keeps that watch while it aids), then
writes the one entry, and when it reads that entry back it answers with its replica as of it,
or of the first position after it where nothing lags (allocations computed in the background).
It aids one joiner at a time.

A frame that does not read, or an answer for another joiner, is logged once and dropped.
Frames for a site that cannot take them in time are dropped: the joiner asks again.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from peer.cluster.aider import Decision, JoinRequest, decide, owed
from peer.cluster.aider import answer as answer_of
from peer.cluster.join_wire import (
    REPLY_SOURCE,
    Ask,
    Reply,
    ask_body,
    read_ask,
    read_reply,
    reply_body,
)
from peer.log.entries.join_direct import JOIN_DIRECT
from peer.log.entry import Entry, Transition
from peer.log.replica import Replica
from peer.log.store import LogStore
from peer.messaging import messages
from peer.messaging.messages import Address, JoinAsk, JoinReply, Message
from peer.messaging.transport import Transport

log = logging.getLogger(__name__)

POLL_WAIT = 0.002
"""Seconds a waiting joiner sleeps between polls of the transport when nothing came."""
AIDING_FOR = 10
"""Join-direct timeouts after which an aider stops waiting to read its entry back (a gc may
have trimmed it unread): it aids others again, and each entry still reads the ring as of its
own position."""


class Host(Protocol):
    """What of its identity a group lends join direct (peer.cluster.group.Incarnation)."""

    id: str
    replica: Replica
    store: LogStore
    lost: threading.Event

    def append(self, entry: Entry) -> None: ...

    def peers_to_announce(self) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
        """The peers the join announces, and the own site of each that listens apart from
        the group: what the group's add-virtual-peer entries would carry."""

    def settled(self) -> Replica:
        """The last replica with nothing lagging (allocations computed in the background may
        lag ``replica``): the only kind a joiner may adopt."""

    def reconcile_watches(self) -> None: ...

    def step_data_plane(self) -> bool: ...


@dataclass(frozen=True)
class Joined:
    """The replica a joiner adopts, from ``aider``, and the entries it owes (aider.owed)."""

    replica: Replica
    aider: str
    owed: tuple[Entry, ...]


class DirectJoin:
    def __init__(
        self,
        host: Host,
        transport: Transport,
        timeout: float,
        seeds: tuple[str, ...],
        tags: tuple[str, ...] = (),
        *,
        rumors: bool = False,
    ) -> None:
        """``timeout``: how long to wait for an aider's answer (and to keep what is owed to a
        joiner); ``rumors``: whether this group takes the log's rumors, said in its join."""
        self.host, self.transport, self.timeout, self.tags = host, transport, timeout, tags
        self.rumors = rumors
        self.seeds = tuple(s for s in seeds if s != transport.address)
        self.outbox: dict[str, tuple[float, deque[bytes]]] = {}
        self.aiding: dict[str, tuple[str, float]] = {}
        """Joiner → its reply site and when to stop waiting: whose join-direct this aider has
        written and not read back."""
        self.answering: list[tuple[str, str, Decision, int]] = []
        """Joined answers not sent yet: (reply site, joiner, decision, the position it joined
        at). Each goes with the first settled replica at or past that position."""
        self.joining = False
        self.replies: list[Reply] = []

    # -- the joiner -----------------------------------------------------------------------------

    def join(
        self, stop: threading.Event, now: Callable[[], float] = time.monotonic
    ) -> Joined | str | None:
        """Ask aiders until one stitches this group in: a Joined; "restart" when its id has
        left; "left" or "lost" when stopped or its session ended meanwhile; None to join by the
        classic protocol (nobody to ask, or one round of asking found nobody to stitch it in)."""
        self.joining = True
        try:
            candidates, read_pulses = list(self.seeds), False
            while True:
                if not candidates and read_pulses:
                    return None
                if not candidates:
                    candidates, read_pulses = self._members(), True
                    continue
                outcome = self._ask(candidates.pop(0), stop, now)
                if outcome is not None:
                    return outcome
        finally:
            self.joining = False

    def _members(self) -> list[str]:
        """The sites of the other groups with a pulse, in an order of this group's own."""
        sites = self.host.store.pulse_sites()
        found = sorted(
            {s for g, s in sites.items() if g != self.host.id} - {self.transport.address}
        )
        random.Random(self.host.id).shuffle(found)
        return found

    def _ask(
        self, site: str, stop: threading.Event, now: Callable[[], float]
    ) -> Joined | str | None:
        h = self.host
        peers, sites = h.peers_to_announce()
        request = JoinRequest(h.id, peers, self.transport.address, self.tags, sites,
                              rumors=self.rumors)  # fmt: skip
        log.info("group %s asks the member at %s to stitch it in", h.id, site)
        self._send(site, JoinAsk(ask_body(Ask(request, self.transport.address))), 0)
        deadline = now() + self.timeout
        while now() < deadline:
            if stop.is_set():
                return "left"
            if h.lost.is_set():
                return "lost"
            outcome = self._answered(site)
            if outcome is not None:
                return outcome if outcome != "next" else None
            if not h.step_data_plane():
                stop.wait(POLL_WAIT)
        log.warning("group %s: the member at %s did not answer in %.1f s; asking another",
                    h.id, site, self.timeout)  # fmt: skip
        self.outbox.pop(site, None)
        return None

    def _answered(self, site: str) -> Joined | str | None:
        """What the replies so far say: Joined, "restart", "next" (refused), or None (wait)."""
        replies, self.replies = self.replies, []
        for reply in replies:
            if reply.decision.joined and reply.replica is not None:
                return Joined(reply.replica, reply.aider, owed(reply.replica, self.host.id))
        for reply in replies:
            if reply.decision.left:
                log.warning("group %s has left the cluster before it heard it had joined; "
                            "starting again under a new id", self.host.id)  # fmt: skip
                return "restart"
            log.info("group %s: member %s at %s will not stitch it in now: %s",
                     self.host.id, reply.aider, site, reply.decision.refused)  # fmt: skip
        return "next" if replies else None

    # -- the aider ------------------------------------------------------------------------------

    def watching(self) -> frozenset[str]:
        """The joiners this aider watches early: those whose entry it has not read back yet."""
        return frozenset(self.aiding)

    def _aid(self, ask: Ask) -> None:
        h = self.host
        joiner, now = ask.request.joiner, time.monotonic()
        self.aiding = {j: held for j, held in self.aiding.items() if held[1] > now}
        decision = decide(h.replica, h.id, ask.request, tuple(sorted(self.aiding)))
        if decision.entry is not None and not h.store.connected:
            decision = Decision(refused=f"aider {h.id} cannot reach the log store now")
        if decision.joined:
            self.answering.append((ask.reply_to, joiner, decision, h.replica.version))
            self.answer_settled()
            return
        if decision.entry is None:
            self._reply(ask.reply_to, Reply(joiner, h.id, decision, None))
            return
        log.info("group %s stitches in group %s (to watch %s)", h.id, joiner, decision.target)
        self.aiding[joiner] = (ask.reply_to, now + AIDING_FOR * self.timeout)
        h.reconcile_watches()
        try:
            h.append(decision.entry)
        except BaseException:
            self.aiding.pop(joiner, None)
            raise

    def applied(self, t: Transition) -> None:
        """Answer the joiner once this aider reads its own join-direct back."""
        args = t.entry.args
        if t.entry.fn != JOIN_DIRECT.name or args.get("aider") != self.host.id:
            return
        joiner = args.get("joiner")
        held = self.aiding.pop(joiner, None) if isinstance(joiner, str) else None
        if held is None:
            return
        site = held[0]
        decision: Decision = answer_of(t)
        if decision.joined:
            self.answering.append((site, args["joiner"], decision, t.entry.position))
            self.answer_settled()
        else:
            self._reply(site, Reply(args["joiner"], self.host.id, decision, None))

    def answer_settled(self) -> None:
        """Send the joined answers the settled replica covers, with it: a joiner adopts a
        replica at or past its join, never one whose allocation is still being computed."""
        settled = self.host.settled()
        due = [a for a in self.answering if a[3] <= settled.version]
        self.answering = [a for a in self.answering if a[3] > settled.version]
        for site, joiner, decision, _ in due:
            self._reply(site, Reply(joiner, self.host.id, decision, settled))

    def _reply(self, site: str, reply: Reply) -> None:
        source = REPLY_SOURCE | (zlib.crc32(self.host.id.encode()) & (REPLY_SOURCE - 1))
        self._send(site, JoinReply(reply_body(reply)), source)

    # -- frames ---------------------------------------------------------------------------------

    def receive(self, message: JoinAsk | JoinReply) -> None:
        """A join ask or reply from the data plane; one that does not read is dropped."""
        try:
            if isinstance(message, JoinAsk):
                self._aid(read_ask(message.body))
                return
            reply = read_reply(message.body)
        except ValueError as e:
            log.warning("group %s dropped a %s: %s", self.host.id, type(message).__name__, e)
            return
        if not self.joining or reply.joiner != self.host.id:
            log.info("group %s dropped an answer from member %s for joiner %s: it is not "
                     "waiting for one", self.host.id, reply.aider, reply.joiner)  # fmt: skip
            return
        self.replies.append(reply)

    def _send(self, site: str, message: Message, source: int) -> None:
        try:
            frames = messages.encode(Address(0, source, 0, 0), message, self.transport.max_frame)
        except ValueError as e:
            log.warning("group %s: a %s for %s cannot be sent: %s",
                        self.host.id, type(message).__name__, site, e)  # fmt: skip
            return
        _, queue = self.outbox.get(site, (0.0, deque()))
        queue.extend(frames)
        self.outbox[site] = (time.monotonic() + self.timeout, queue)

    def flush(self) -> bool:
        """Offer what is queued, in order per site; what a site has not taken by its deadline
        is dropped (the joiner asks again, the aider is asked again)."""
        sent = False
        for site, (deadline, queue) in list(self.outbox.items()):
            try:
                while queue and self.transport.offer(site, queue[0]):
                    queue.popleft()
                    sent = True
            except Exception as e:
                log.warning("group %s cannot send to %s: %s", self.host.id, site, e)
                queue.clear()
            if not queue or time.monotonic() > deadline:
                del self.outbox[site]
        return sent
