"""Where a member gets the log's next entries from: the one seam between a group and the ways
of reading the log.

The classic feed lists the entries after the replica's version whenever the log directory's
watch fires (peer.log.subscriber); the epidemic feed learns them from other members' rumors and
reads ZooKeeper by position when they fall silent (peer.log.epidemic.feed). Either hands the
group the entries in log order, each once, possibly led by a set-replica after a trim; the group
tells it what it wrote, so that the epidemic feed can spread it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

from peer import metrics
from peer.log import subscriber
from peer.log.entry import Entry
from peer.log.replica import Replica
from peer.log.store import LogStore


class LogFeed(Protocol):
    @property
    def takes_rumors(self) -> bool:
        """Whether this member keeps and passes on rumors: its announcement says so, and only
        such members are sent them."""

    def next_entries(self, after: int, replica: Replica) -> list[Entry]:
        """The entries after position ``after`` (the last one the group took), in order; []
        when none has come yet. ``replica`` is the group's, for who the members are: it may lag
        behind ``after`` while an allocation is computed in the background."""

    def wrote(self, position: int, entry: Entry, replica: Replica) -> None:
        """This member appended ``entry``, with ``replica`` applied, and the log put it at
        ``position``."""

    def receive(self, payload: bytes) -> None:
        """A rumor's payload, from another member."""

    def due_in(self, now: float) -> float:
        """Seconds from ``now`` until the feed wants to be asked again, without a wakeup."""

    def tail(self) -> int:
        """The newest position this member knows the log to hold, for its metrics (from any
        thread); StoreError when finding out needs the store and it cannot answer."""

    def close(self) -> None: ...


@dataclass(frozen=True)
class ClassicFeed:
    """The log directory's watch wakes the group, which lists what is new."""

    store: LogStore

    def next_entries(self, after: int, replica: Replica) -> list[Entry]:
        return subscriber.poll(self.store, after)

    def wrote(self, position: int, entry: Entry, replica: Replica) -> None:
        """Every reader hears of it from the directory's watch."""

    @property
    def takes_rumors(self) -> bool:
        return False

    def receive(self, payload: bytes) -> None:
        """A classic member neither keeps nor passes on rumors; it reads the log itself. It
        counts them: none should come, as it never says that it takes them."""
        metrics.RUMORS_RECEIVED.inc()

    def due_in(self, now: float) -> float:
        return math.inf

    def tail(self) -> int:
        return self.store.tail()

    def close(self) -> None:
        """Nothing is open."""
