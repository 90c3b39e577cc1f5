"""Which feed a member reads the log through: the classic subscriber, or, with the epidemic
log mode on and a transport to gossip over, the epidemic feed (peer.log.feed)."""

from __future__ import annotations

from collections.abc import Callable

from peer.cluster.modes import CoordinationModes
from peer.log.epidemic.feed import EpidemicFeed, FeedSettings
from peer.log.feed import ClassicFeed, LogFeed
from peer.log.store import LogStore
from peer.messaging.transport import Transport


def feed_for(
    store: LogStore,
    modes: CoordinationModes,
    me: str,
    transport: Transport | None,
    wake: Callable[[], None],
) -> LogFeed:
    """Without a transport there is nobody to gossip with: every entry would come from the
    timer, so such a member (embedded, in one process) keeps the classic feed."""
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
