"""The epidemic feed: a member's log, learned from rumors and read from ZooKeeper by position.

Every rumor that arrives is kept in the reorder cache (or, for an entry too large for one frame,
noted by position) and passed on as peer.log.epidemic.rumor says; what the member writes itself
it originates. The group asks for the next entries and gets the contiguous run the cache holds.
When the next position has not come for a silence (peer.log.epidemic.fallback), the feed reads
that one znode; a position announced without its bytes is read as soon as it is next. Nothing
here lists or watches the log directory, with one exception below.

A read that finds nothing while later positions are known to exist (a rumor or this member's
own write named them) means one of two things. Either a gc trimmed the entry, and the origin is
newer than it: the feed jumps to the origin as peer.log.subscriber does. Or the server this
session talks to has not seen the entry yet, and the next silence reads it again. ZooKeeper's
sequence numbers are contiguous, even across trims and restarts, so a position that stays
missing while later ones exist should never happen; as a safety net, after ``STUCK_SILENCES``
silences of it the feed logs one warning and lists the log once from there.

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
from peer.log.epidemic.fallback import Fallback
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
        self.sites: dict[str, str] = {}
        self.spread: Spread | None = None
        self.groups: object = None
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
                self.fallback = self.fallback.after_consumed(now)
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
        if self.spread is not None:
            rumor = Rumor(position, data, 0)
            rng = copy_rng(self.me, self.me, rumor)
            self._send(originate(position, data, self.me, self.members, rng=rng,
                                 spread=self.spread), whole=True)  # fmt: skip

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
        origin, or adopted an aider's replica). The live members are those with a site: in the
        ring, or joining it (a site is announced with a group's first virtual peer and goes when
        the group leaves)."""
        if self.cache.next <= after:
            self.cache = self.cache.advance_to(after + 1)
            self.announced = {p for p in self.announced if p > after}
            self.own = {p for p in self.own if p > after}
        if replica.groups is self.groups:
            return
        self.groups = replica.groups
        self.sites = dict(replica.sites)
        self.members = LiveMembers.of(g for g in self.sites if g != self.me)
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

    def _read_next(self, now: float) -> list[Entry]:
        """The next entry read from ZooKeeper, if a read is due and finds it; [] otherwise."""
        position = self.cache.next
        if position not in self.announced and self.fallback.position_to_read(now, position) is None:
            return []
        self.announced.discard(position)
        entry = self.store.read_at(position)
        metrics.READS_BY_POSITION.labels(str(entry is not None).lower()).inc()
        self.fallback = self.fallback.after_read(now, entry is not None)
        if entry is not None:
            self.cache = self.cache.advance_to(position + 1)
            metrics.ENTRIES_LEARNED.labels("zookeeper").inc()
            return [entry]
        if self.known <= position:  # the log ends here, as far as anyone has said
            return []
        return self._missing(now, position)

    def _missing(self, now: float, position: int) -> list[Entry]:
        """``position`` is not in ZooKeeper though later ones are: trimmed, or not yet seen by
        this session's server (or, which should never happen, a gap)."""
        origin = self.store.origin()
        if origin is not None and origin.version >= position:
            log.warning("group %s: log entries from position %d were trimmed by gc; jumping to "
                        "the origin at %d", self.me, position, origin.version)  # fmt: skip
            self.cache = self.cache.advance_to(origin.version + 1)
            metrics.ENTRIES_LEARNED.labels("origin").inc()
            return [set_replica(origin)]
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
