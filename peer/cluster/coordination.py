"""What the coordination modes (peer.cluster.modes) change, decided in one place: a member's
``Coordination``, built once from its modes, hands its group each part they choose between, and
nothing else asks which mode is on.

- the log feed: the epidemic feed with the epidemic log on and a transport to gossip over; the
  classic subscriber otherwise (without a transport there is nobody to gossip with, so such a
  member, embedded in one process, keeps it);
- whether the store watches the log directory: not with the epidemic log, whose feed reads
  ZooKeeper by position only when gossip falls silent;
- the planner: the scheduling servers' client with servers named, the local planner otherwise;
- the applier: allocations on a thread of their own with async allocation, in line otherwise;
- the first join: asking aiders with join-direct (and a transport), the classic join otherwise.
  Every member with a transport aids others' direct joins whatever its own modes, as every
  member reads the entries they write.
- whether the member's virtual peers take log rumors: with the epidemic log on.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from peer.cluster.applier import Applier, Background, Sequential
from peer.cluster.direct_join import DirectJoin, Host, Joined
from peer.cluster.modes import CoordinationModes
from peer.log.epidemic.feed import EpidemicFeed, FeedSettings
from peer.log.feed import ClassicFeed, LogFeed
from peer.log.replica import Replica
from peer.log.store import LogStore
from peer.messaging.transport import Transport
from peer.scheduling.client import SchedulingClient
from peer.scheduling.request import Planner, plan_here

FirstJoin = Callable[[threading.Event], Joined | str | None]
"""How a group first tries to join: a Joined, an ending ("restart", "left", "lost"), or None to
join by the classic protocol."""


@dataclass(frozen=True)
class Coordination:
    modes: CoordinationModes

    @property
    def watches_log(self) -> bool:
        return not self.modes.epidemic_log

    @property
    def takes_rumors(self) -> bool:
        return self.modes.epidemic_log

    def planner(self) -> Planner:
        modes = self.modes
        if not modes.scheduler_servers:
            return plan_here
        return SchedulingClient(modes.scheduler_servers, modes.scheduler_timeout).plan

    def applier(self, replica: Replica, wakeup: threading.Event, planner: Planner) -> Applier:
        if self.modes.async_allocation:
            return Background(replica, wakeup, planner)
        return Sequential(replica, planner)

    def feed(
        self, store: LogStore, me: str, transport: Transport | None, wake: Callable[[], None]
    ) -> LogFeed:
        modes = self.modes
        if not modes.epidemic_log or transport is None:
            return ClassicFeed(store)
        beacon = transport.beacon()
        settings = FeedSettings(
            fanout=modes.gossip_fanout,
            rounds=modes.gossip_rounds,
            silence=modes.log_read_after,
            cache=modes.reorder_cache,
        )
        return EpidemicFeed(
            store, me, beacon.offer, beacon.max_frame, settings, wake=wake, forget=beacon.forget
        )

    def direct_join(
        self, host: Host, transport: Transport | None, seeds: tuple[str, ...], tags: tuple[str, ...]
    ) -> DirectJoin | None:
        """The group's side of join-direct: it asks aiders with the mode on, and aids others
        whatever its modes; none without a transport to ask or answer over."""
        if transport is None:
            return None
        modes = self.modes
        return DirectJoin(host, transport, modes.join_direct_timeout, seeds, tags,
                          rumors=self.takes_rumors)  # fmt: skip

    def first_join(self, direct: DirectJoin | None) -> FirstJoin:
        if self.modes.join_direct and direct is not None:
            return direct.join
        return _classic


def _classic(stop: threading.Event) -> None:
    """Nobody is asked: the group joins by the classic protocol."""
