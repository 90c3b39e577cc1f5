"""The epidemic feed: a member's log, learned from rumors and read from ZooKeeper by position.

Every rumor that arrives is kept in the reorder cache (or, for an entry too large for one frame,
noted by position) and passed on as peer.log.epidemic.rumor says; what the member writes itself
it originates. The group asks for the next entries and gets the contiguous run the cache holds.
When the next position has not come for a silence (peer.log.epidemic.fallback), the feed reads
that one znode; a position announced without its bytes is read as soon as it is next. Nothing
here lists or watches the log directory, with one exception below.

A read that finds nothing is followed by one small read of the origin's version: when a gc
trimmed the entry (the origin reaches it) the feed jumps to the origin as peer.log.subscriber
does, whether or not anyone said that later positions exist (a member with gossip off, or
whose rumors were lost, hears of none). Otherwise the entry is not written yet, or, when later
positions are known to exist (a rumor or this member's own write named them), the server this
session talks to has not seen it yet, and the next silence reads it again. ZooKeeper's sequence
numbers are contiguous, even across trims and restarts, so a position that stays missing while
later ones exist should never happen; as a safety net, after ``STUCK_SILENCES`` silences of it
the feed logs one warning and lists the log once from there.

Only members that take rumors are sent one: the replica's ``rumor_takers``, the groups whose
announcement said so. An entry nobody gossiped (the command line writes without a transport)
is read first by its scout (peer.log.epidemic.fallback), which starts its rumor when it had
heard nothing of it, so the others learn it by gossip rather than each reading it.

The feed runs on the group's thread: rumors arrive through the data plane's poll, and sends go
through a beacon of the feed's own. Its randomness comes from the rumors themselves (copy_rng).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from peer import metrics
from peer.log import subscriber
from peer.log.entries.gc import set_replica
from peer.log.entry import Entry
from peer.log.epidemic import wire
from peer.log.epidemic.fallback import Fallback, scout, trimmed
from peer.log.epidemic.reorder import ReorderCache
from peer.log.epidemic.rumor import (
    LiveMembers,
    Rumor,
    Sends,
    Spread,
    copy_rng,
    forward,
    originate,
    rounds_for,
)
from peer.log.replica import EMPTY_VERSION, Replica
from peer.log.store import LogStore
from peer.messaging import messages
from peer.messaging.messages import NOWHERE, LogRumor

log = logging.getLogger(__name__)

STUCK_SILENCES = 3
"""Silences a position may stay missing, with later ones known, before the feed lists the log."""
RETRY = 0.01
"""Seconds between offers of a copy Aeron refused: a publication to a member takes a moment to
connect after its first offer, and a copy is sent only once."""


@dataclass(frozen=True)
class FeedSettings:
    fanout: int = 3
    """Members each copy goes to; 0 sends none (the feed then reads every entry itself)."""
    rounds: int | None = None
    """Rounds a copy is passed on; None: rumor.rounds_for the live members."""
    silence: float = 1.0
    """Seconds without a new entry before the next position is read from ZooKeeper."""
    cache: int = 4096
    """Entries held ahead of the next position."""

    def __post_init__(self) -> None:
        if self.fanout < 0:
            raise ValueError(f"the gossip fan-out must be 0 or more, not {self.fanout}")


class EpidemicFeed:
    """The log as member ``me`` learns it. ``send(site, frame)`` offers one frame (False when
    refused: the copy is lost, as gossip allows), ``max_frame`` is the largest it takes,
    ``wake`` tells the group an entry is ready, ``forget(site)`` closes what ``send`` opened."""

    def __init__(
        self,
        store: LogStore,
        me: str,
        send: Callable[[str, bytes], object],
        max_frame: int,
        settings: FeedSettings,
        *,
        clock: Callable[[], float] = time.monotonic,
        wake: Callable[[], None] = lambda: None,
        forget: Callable[[str], object] = lambda _: None,
    ) -> None:
        self.store, self.me, self.send, self.max_frame = store, me, send, max_frame
        self.settings, self.clock, self.wake, self.forget = settings, clock, wake, forget
        self.cache = ReorderCache(0, settings.cache)
        self.fallback = Fallback(settings.silence, clock())
        """Due at once: a member that starts catches up on the log before it writes."""
        self.known = EMPTY_VERSION
        """The highest position known to exist: from a rumor, or this member's own write."""
        self.announced: set[int] = set()
        """Positions rumored without their bytes, to read as soon as they are next."""
        self.own: set[int] = set()
        self.missing: tuple[int, float] | None = None
        """(position, since when) it has been missing with later positions known."""
        self.listed = EMPTY_VERSION
        self.members = LiveMembers(())
        """The other members that take rumors, which the feed gossips to."""
        self.takers: tuple[str, ...] = ()
        """Every member that takes rumors, this one too: among whom the scouts are drawn."""
        self.sites: dict[str, str] = {}
        self.spread: Spread | None = None
        self.groups: object = None
        self.rumor_takers: object = None
        self.caught_up = False
        """Whether a read found the log's end since the start: a member catching up on a
        backlog starts no rumor for the old entries it reads."""
        self.refused: deque[tuple[str, bytes, float]] = deque()
        """Copies Aeron refused, (site, frame, until when to offer them again)."""

    # -- what the group asks --------------------------------------------------------------------

    def next_entries(self, after: int, replica: Replica) -> list[Entry]:
        self._follow(after, replica)
        now = self.clock()
        self._offer_refused(now)
        entries: list[Entry] = []
        while True:
            run, self.cache = self.cache.take()
            if run:
                entries.extend(self._consumed(position, data) for position, data in run)
                self.fallback = self.fallback.after_consumed(now, self._scouting(self.cache.next))
                continue
            read = self._read_next(now)
            if not read:
                return entries
            entries.extend(read)

    def wrote(self, position: int, entry: Entry, replica: Replica) -> None:
        self._follow(replica.version, replica)
        data = entry.encode()
        self.known = max(self.known, position)
        if position >= self.cache.next:
            self.cache = self.cache.add(position, data)
            self.own.add(position)
        self._originate(position, data)

    @property
    def takes_rumors(self) -> bool:
        return True

    def tail(self) -> int:
        """The highest position heard of or taken: the log is never listed for the metrics
        either (the classic feed's tail lists it)."""
        return max(self.known, self.cache.next - 1)

    def receive(self, payload: bytes) -> None:
        try:
            rumor, sender, whole = wire.decode(payload)
        except wire.RumorError as e:
            metrics.RUMORS_DROPPED.inc()
            log.warning("group %s dropped a rumor: %s", self.me, e)
            return
        metrics.RUMORS_RECEIVED.inc()
        self.known = max(self.known, rumor.position)
        if whole:
            self.cache = self.cache.add(rumor.position, rumor.data)
        elif self.cache.next <= rumor.position < self.cache.next + self.settings.cache:
            self.announced.add(rumor.position)
        if self.spread is not None:
            rng = copy_rng(self.me, sender, rumor)
            self._send(forward(rumor, self.me, self.members, rng=rng, spread=self.spread), whole)
        if self.cache.next in self.cache.held or self.cache.next in self.announced:
            self.wake()

    def due_in(self, now: float) -> float:
        if self.cache.next in self.cache.held or self.cache.next in self.announced:
            return 0.0
        wait = max(self.fallback.due_at - now, 0.0)
        return min(wait, RETRY) if self.refused else wait

    def close(self) -> None:
        for site in sorted(set(self.sites.values())):
            self.forget(site)

    # -- following the replica ------------------------------------------------------------------

    def _follow(self, after: int, replica: Replica) -> None:
        """The cache waits for the position after ``after`` (the group may have booted from an
        origin, or adopted an aider's replica). The live members are the rumor takers with a
        site: in the ring, or joining it (both are announced with a group's first virtual peer
        and go when the group leaves)."""
        if self.cache.next <= after:
            self.cache = self.cache.advance_to(after + 1)
            self.announced = {p for p in self.announced if p > after}
            self.own = {p for p in self.own if p > after}
        if replica.groups is self.groups and replica.rumor_takers is self.rumor_takers:
            return
        self.groups, self.rumor_takers = replica.groups, replica.rumor_takers
        self.sites = dict(replica.sites)
        self.takers = tuple(sorted(g for g in replica.rumor_takers if g in self.sites))
        self.members = LiveMembers.of(g for g in self.takers if g != self.me)
        self.spread = self._spread(len(self.members.ids) + 1)

    def _spread(self, members: int) -> Spread | None:
        fanout, rounds = self.settings.fanout, self.settings.rounds
        if fanout == 0:
            return None
        return Spread(fanout, rounds or rounds_for(members, fanout))

    # -- consuming ------------------------------------------------------------------------------

    def _consumed(self, position: int, data: bytes) -> Entry:
        source = "written" if position in self.own else "gossip"
        self.own.discard(position)
        metrics.ENTRIES_LEARNED.labels(source).inc()
        return Entry.decode(data, position)

    def _scouting(self, position: int) -> bool:
        """Whether this member reads ``position`` after one silence: it is the position's scout,
        or there is no scout to wait for (gossip is off, or no member takes rumors yet)."""
        return self.spread is None or scout(position, self.takers) in (None, self.me)

    def _read_next(self, now: float) -> list[Entry]:
        """The next entry read from ZooKeeper, if a read is due and finds it; [] otherwise."""
        position = self.cache.next
        announced = position in self.announced
        if not announced and self.fallback.position_to_read(now, position) is None:
            return []
        self.announced.discard(position)
        entry = self.store.read_at(position)
        metrics.READS_BY_POSITION.labels(str(entry is not None).lower()).inc()
        scouting = self._scouting(position)
        self.fallback = self.fallback.after_read(now, entry is not None, scouting)
        if entry is not None:
            self.cache = self.cache.advance_to(position + 1)
            metrics.ENTRIES_LEARNED.labels("zookeeper").inc()
            if scouting and not announced and self.caught_up and self.known < position:
                self._originate(position, entry.encode())
            self.known = max(self.known, position)
            return [entry]
        self.caught_up = True
        if trimmed(position, self.store.origin_version()):
            return self._jump_to_origin(now, position)
        if self.known <= position:  # the log ends here, as far as anyone has said
            return []
        return self._missing(now, position)

    def _jump_to_origin(self, now: float, position: int) -> list[Entry]:
        """``position`` was trimmed by a gc: the origin replaces it and everything before, and
        what follows the origin is read at once, as after any read that found an entry."""
        origin = self.store.origin()
        if origin is None or not trimmed(position, origin.version):
            return []  # a trim cannot be undone: only a store that lost its data says this
        log.warning("group %s: log entries from position %d were trimmed by gc; jumping to "
                    "the origin at %d", self.me, position, origin.version)  # fmt: skip
        self.cache = self.cache.advance_to(origin.version + 1)
        self.fallback = self.fallback.after_read(now, found=True)
        metrics.ENTRIES_LEARNED.labels("origin").inc()
        return [set_replica(origin)]

    def _missing(self, now: float, position: int) -> list[Entry]:
        """``position`` is not in ZooKeeper, nor trimmed, though later ones are: not yet seen by
        this session's server (or, which should never happen, a gap)."""
        if self.missing is None or self.missing[0] != position:
            self.missing = (position, now)
        stuck = now - self.missing[1] >= STUCK_SILENCES * self.settings.silence
        if not stuck or self.listed == position:
            return []
        self.listed = position
        log.warning("group %s: log position %d is missing while position %d exists; listing the "
                    "log once from there", self.me, position, self.known)  # fmt: skip
        entries = subscriber.poll(self.store, position - 1)
        if entries:
            self.cache = self.cache.advance_to(entries[-1].position + 1)
            metrics.ENTRIES_LEARNED.labels("listing").inc(len(entries))
        return entries

    # -- sending --------------------------------------------------------------------------------

    def _originate(self, position: int, data: bytes) -> None:
        """Round 0 of the entry at ``position``: its writer, or its scout when nobody
        gossiped it."""
        if self.spread is None:
            return
        rng = copy_rng(self.me, self.me, Rumor(position, data, 0))
        self._send(originate(position, data, self.me, self.members, rng=rng, spread=self.spread),
                   whole=True)  # fmt: skip

    def _send(self, sends: Sends, whole: bool) -> None:
        """One frame for every target; an entry too large for it goes as its position alone.
        A copy Aeron refuses is offered again for up to a silence, then given up."""
        if not sends.targets:
            return
        frame = self._frame(sends.rumor, whole)
        until = self.clock() + self.settings.silence
        for target in sends.targets:
            site = self.sites.get(target)
            if site is not None and not self._offer(site, frame):
                self.refused.append((site, frame, until))
        while len(self.refused) > self.settings.cache:
            self.refused.popleft()

    def _offer_refused(self, now: float) -> None:
        for _ in range(len(self.refused)):
            site, frame, until = self.refused.popleft()
            if until > now and not self._offer(site, frame):
                self.refused.append((site, frame, until))

    def _offer(self, site: str, frame: bytes) -> bool:
        """Whether Aeron took ``frame`` for ``site``; an error loses this copy alone."""
        try:
            taken = bool(self.send(site, frame))
        except Exception as e:  # one lost copy must not stop the group
            log.warning("group %s: a rumor was not sent to %s: %s", self.me, site, e)
            return True
        if taken:
            metrics.RUMORS_SENT.inc()
        return taken

    def _frame(self, rumor: Rumor, whole: bool) -> bytes:
        frames = messages.encode(NOWHERE, LogRumor(wire.encode(rumor, self.me, with_data=whole)),
                                 self.max_frame)  # fmt: skip
        if len(frames) == 1:
            return frames[0]
        payload = wire.encode(rumor, self.me, with_data=False)
        return messages.encode(NOWHERE, LogRumor(payload), self.max_frame)[0]
