"""Nexmark's events made a batch at a time, as Arrow columns: the very events peer.nexmark.events
makes one at a time, for the inputs that read Arrow (``format: arrow``).

Bids, most of the events, are made column by column: each field's draws for every bid of the
batch at once (numpy, SplitMix64 on 64-bit words), a bid's k-th draw where the event-at-a-time
generator takes it, so that the values are the same. What a bid draws depends on what it drew
before (a hot auction draws once, a recent one twice), so each draw is taken only by the bids
whose stream is at it (``ColumnDraws.below``, with a mask). Strings are cut from the same pools,
and a channel's name and URL taken from the table of every channel. People and auctions, a
twelfth of the events by default, are made one at a time; each column is then put together in
the events' order by one take.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from peer.nexmark.config import NexmarkConfig
from peer.nexmark.events import (
    CHANNELS,
    FIRST_AUCTION_ID,
    FIRST_PERSON_ID,
    FUTURE_IDS,
    GOLDEN,
    HOT_CHANNELS,
    HOT_RATIO,
    MASK,
    POOL,
    channel_urls,
    event,
    event_id,
    hot_urls,
    mix,
    pools,
)

EVENT_SCHEMA = pa.schema(
    [("kind", pa.string()), ("id", pa.int64()), ("name", pa.string()),
     ("emailAddress", pa.string()), ("creditCard", pa.string()), ("city", pa.string()),
     ("state", pa.string()), ("dateTime", pa.int64()), ("extra", pa.string()),
     ("itemName", pa.string()), ("description", pa.string()), ("initialBid", pa.int64()),
     ("reserve", pa.int64()), ("expires", pa.int64()), ("seller", pa.int64()),
     ("category", pa.int64()), ("auction", pa.int64()), ("bidder", pa.int64()),
     ("price", pa.int64()), ("channel", pa.string()), ("url", pa.string())]
)  # fmt: skip
"""Every kind's fields as one Arrow schema, null where a kind has none."""

U64 = np.uint64
_GOLDEN = U64(GOLDEN)


class ColumnDraws:
    """The random streams of a batch of events, one per event id, each where its event-at-a-time
    counterpart (peer.nexmark.events.Draws) would be."""

    def __init__(self, seed: int, ids: np.ndarray) -> None:
        start = U64(seed & MASK) + (ids.astype(U64) + U64(1)) * _GOLDEN
        self.state = mix(start)

    def _next(self, taking: np.ndarray | None) -> np.ndarray:
        if taking is None:
            self.state = self.state + _GOLDEN
            return mix(self.state)
        state = self.state[taking] + _GOLDEN
        self.state[taking] = state
        return mix(state)

    def below(self, n: int | np.ndarray, taking: np.ndarray | None = None) -> np.ndarray:
        """Uniform on 0 .. n - 1 (n per stream, or one for all), for the streams ``taking``
        (a mask; None: all) each at its next draw."""
        bound = n.astype(U64) if isinstance(n, np.ndarray) else U64(n)
        return (self._next(taking) % bound).astype(np.int64)

    def unit(self) -> np.ndarray:
        """Uniform on [0, 1), for every stream."""
        return (self._next(None) >> U64(11)).astype(np.float64) * 2.0**-53


def event_times(config: NexmarkConfig, ids: np.ndarray) -> np.ndarray:
    return config.base_time + (ids * config.inter_event_delay_us).astype(np.int64) // 1000


def _bids(config: NexmarkConfig, ids: np.ndarray) -> np.ndarray:
    return ids % config.total_proportion >= config.person_proportion + config.auction_proportion


def _last_person(config: NexmarkConfig, ids: np.ndarray) -> np.ndarray:
    epoch, offset = np.divmod(ids, config.total_proportion)
    return epoch * config.person_proportion + np.minimum(offset, config.person_proportion - 1)


def _last_auction_of_bids(config: NexmarkConfig, ids: np.ndarray) -> np.ndarray:
    """As peer.nexmark.events.last_auction, for bids only: past every auction of their run."""
    return (ids // config.total_proportion) * config.auction_proportion + (
        config.auction_proportion - 1
    )


def _bidder(config: NexmarkConfig, ids: np.ndarray, draws: ColumnDraws) -> np.ndarray:
    hot = draws.below(config.hot_bidders_ratio) > 0
    last = _last_person(config, ids)
    bidder = (last // HOT_RATIO) * HOT_RATIO + 1
    cold = ~hot
    people = last[cold] + 1
    active = np.minimum(people, config.num_active_people)
    bidder[cold] = people - active + draws.below(active + FUTURE_IDS, cold)
    return bidder


def _auction(config: NexmarkConfig, ids: np.ndarray, draws: ColumnDraws) -> np.ndarray:
    hot = draws.below(config.hot_auction_ratio) > 0
    last = _last_auction_of_bids(config, ids)
    auction = (last // HOT_RATIO) * HOT_RATIO
    cold = ~hot
    low = np.maximum(last[cold] - config.num_in_flight_auctions, 0)
    auction[cold] = low + draws.below(last[cold] - low + 1 + FUTURE_IDS, cold)
    return auction


def _price(draws: ColumnDraws) -> pa.Array:
    """Cents, log-uniform from $1 to $1M: Arrow's power is the C library's, as Python's is."""
    powered = pc.power(10.0, pa.array(draws.unit() * 6))
    return pc.cast(pc.floor(pc.add(pc.multiply(powered, 100.0), 0.5)), pa.int64())


@functools.cache
def _channels() -> tuple[pa.Array, pa.Array]:
    """Every channel's name and URL: the hot ones first, then ``channel-0`` on."""
    names = [*HOT_CHANNELS, *(f"channel-{number}" for number in range(CHANNELS))]
    return pa.array(names, pa.string()), pa.array([*hot_urls(), *channel_urls()], pa.string())


def _channel(draws: ColumnDraws) -> np.ndarray:
    """Each bid's index into ``_channels``."""
    hot = draws.below(2) > 0
    index = np.empty(len(hot), np.int64)
    index[hot] = draws.below(len(HOT_CHANNELS), hot)
    cold = ~hot
    index[cold] = len(HOT_CHANNELS) + draws.below(CHANNELS, cold)
    return index


def _extra(draws: ColumnDraws, size: int, average: int, count: int) -> list[str]:
    """Padding that brings records of ``size`` bytes to ``average`` on average (as the
    event-at-a-time ``_extra``): slices of the padding pool."""
    if size > average:
        return [""] * count
    short = average - size
    delta = int(short * 0.2 + 0.5)
    length = np.full(count, short - delta, np.int64)
    if delta:
        length += draws.below(2 * delta)
    start = draws.below(POOL - length)
    pool = pools()[1]
    return [pool[a : a + n] for a, n in zip(start.tolist(), length.tolist(), strict=True)]


KINDS = pa.array(["person", "auction", "bid"], pa.string())
BID = 2

OTHERS_ONLY = ("id", "name", "emailAddress", "creditCard", "city", "state", "itemName",
               "description", "initialBid", "reserve", "expires", "seller", "category")  # fmt: skip
"""The fields of people and auctions, null in bids."""


class Placed:
    """Where each event of a batch stands among its bids and among its other events: columns of
    one or the other are made where they belong, and null elsewhere, by one take each."""

    def __init__(self, is_bid: np.ndarray) -> None:
        bids, others = np.flatnonzero(is_bid), np.flatnonzero(~is_bid)
        index = np.zeros(len(is_bid), np.int64)
        index[bids] = np.arange(len(bids))
        index[others] = np.arange(len(others))
        self.in_bids = pa.array(index, mask=~is_bid)
        self.in_others = pa.array(index, mask=is_bid)
        order = index.copy()
        order[others] += len(bids)
        self.order = pa.array(order)
        """Where each event is in the bids' values followed by the others'."""


def batch(config: NexmarkConfig, runs: Sequence[range]) -> pa.RecordBatch:
    """The events numbered ``runs``, in order, as one batch of EVENT_SCHEMA."""
    numbers = np.concatenate([np.arange(run.start, run.stop, dtype=np.int64) for run in runs])
    ids = event_id(config, numbers)  # the same arithmetic, on every number at once
    is_bid = _bids(config, ids)
    placed = Placed(is_bid)
    bid_ids = ids[is_bid]
    draws = ColumnDraws(config.seed, bid_ids)
    auction = _auction(config, bid_ids, draws) + FIRST_AUCTION_ID
    bidder = _bidder(config, bid_ids, draws) + FIRST_PERSON_ID
    price = _price(draws)
    channel = pa.array(_channel(draws))
    extra = _extra(draws, 32, config.avg_bid_byte_size, len(bid_ids))
    others = [event(config, int(n)) for n in numbers[~is_bid]]
    names, urls = _channels()
    codes = np.full(len(ids), BID, np.int64)
    codes[~is_bid] = [0 if other["kind"] == "person" else 1 for other in others]
    columns = {
        "kind": KINDS.take(pa.array(codes)),
        "dateTime": pa.array(event_times(config, ids)),
        "extra": pa.array(extra + [other["extra"] for other in others], pa.string()).take(
            placed.order
        ),
        "auction": pa.array(auction).take(placed.in_bids),
        "bidder": pa.array(bidder).take(placed.in_bids),
        "price": price.take(placed.in_bids),
        "channel": names.take(channel).take(placed.in_bids),
        "url": urls.take(channel).take(placed.in_bids),
    }
    for name in OTHERS_ONLY:
        values = pa.array([other.get(name) for other in others], EVENT_SCHEMA.field(name).type)
        columns[name] = values.take(placed.in_others)
    return pa.RecordBatch.from_arrays([columns[name] for name in EVENT_SCHEMA.names],
                                      schema=EVENT_SCHEMA)  # fmt: skip
