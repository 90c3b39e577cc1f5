"""What a Nexmark generator is told: the reference generator's settings, under its names made
snake_case, with its defaults, checked once, with one message naming the setting that is out
of range.

The defaults are the reference's: people, auctions and bids in the proportion 1:3:46 by event
id; half the bids on a hot auction and three quarters by a hot bidder, three quarters of the
auctions by a hot seller; 100 auctions in flight and 1,000 people active; events at 10,000 a
second of event time. Event time starts at ``base_time`` (milliseconds since the epoch), fixed
by default, so that a run's events are the same whenever it runs."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

BASE_TIME = 1_767_225_600_000
"""2026-01-01T00:00:00Z, in milliseconds: where event time starts unless told."""

OUT_OF_ORDER_PRIME = 953
"""What permutes the event numbers within a group of ``out_of_order_group_size``: a group whose
size it divides would not be permuted but folded, and is refused."""

LIMIT = 2**62
"""The most events, and the largest base time, a configuration may name: ids and times stay
within 64 bits."""


class SettingError(ValueError):
    """A Nexmark setting out of range; the message names it."""


@dataclass(frozen=True, slots=True)
class NexmarkConfig:
    """A Nexmark generator's settings (see the module's docstring)."""

    events: int | None = None
    """How many events in all (None: unbounded)."""
    rate: float = 10_000.0
    """Events per second of event time (the reference's first event rate)."""
    seed: int = 0
    """Every field drawn at random is a function of this and the event's id."""
    base_time: int = BASE_TIME
    person_proportion: int = 1
    auction_proportion: int = 3
    bid_proportion: int = 46
    hot_auction_ratio: int = 2
    hot_sellers_ratio: int = 4
    hot_bidders_ratio: int = 4
    num_in_flight_auctions: int = 100
    num_active_people: int = 1000
    avg_person_byte_size: int = 200
    avg_auction_byte_size: int = 500
    avg_bid_byte_size: int = 100
    out_of_order_group_size: int = 1
    """Event numbers are permuted within groups of this many (1: in order)."""
    watermark_delay_ms: int = 0
    """How far the watermark stays behind the least event time still to come."""

    def __post_init__(self) -> None:
        for name, ok, what in _CHECKS:
            value = getattr(self, name)
            if not ok(value):
                raise SettingError(f"nexmark {name} must be {what}, got {value!r}")
        if self.out_of_order_group_size % OUT_OF_ORDER_PRIME == 0:
            group = self.out_of_order_group_size
            raise SettingError(f"nexmark out_of_order_group_size must not be a multiple of "
                              f"{OUT_OF_ORDER_PRIME}, got {group}")  # fmt: skip

    @classmethod
    def of(cls, params: dict[str, Any]) -> NexmarkConfig:
        """The settings ``params`` names (the rest default); a SettingError names one that is
        unknown or out of range."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(params) - known)
        if unknown:
            raise SettingError(f"nexmark has no setting {unknown[0]!r} (settings: "
                              f"{', '.join(sorted(known))})")  # fmt: skip
        try:
            return cls(**params)
        except TypeError as e:  # a value of the wrong type, compared
            raise SettingError(f"nexmark settings: {e}") from None

    @property
    def total_proportion(self) -> int:
        return self.person_proportion + self.auction_proportion + self.bid_proportion

    @property
    def inter_event_delay_us(self) -> float:
        """Microseconds of event time between one event and the next."""
        return 1_000_000.0 / self.rate


def _int(low: int, high: int = LIMIT) -> Any:
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and low <= v <= high


def _rate(value: Any) -> bool:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    return number and math.isfinite(value) and 0.001 <= value <= 1e9


_CHECKS: list[tuple[str, Any, str]] = [
    ("events", lambda v: v is None or _int(0)(v), f"None or an int from 0 to {LIMIT}"),
    ("rate", _rate, "a number of events per second from 0.001 to 1e9"),
    ("seed", _int(0, 2**64 - 1), "an int from 0 to 2**64 - 1"),
    ("base_time", _int(0), f"milliseconds since the epoch, from 0 to {LIMIT}"),
    ("person_proportion", _int(1, 1000), "an int from 1 to 1000"),
    ("auction_proportion", _int(1, 1000), "an int from 1 to 1000"),
    ("bid_proportion", _int(1, 1000), "an int from 1 to 1000"),
    ("hot_auction_ratio", _int(1, 1000), "an int from 1 to 1000"),
    ("hot_sellers_ratio", _int(1, 1000), "an int from 1 to 1000"),
    ("hot_bidders_ratio", _int(1, 1000), "an int from 1 to 1000"),
    ("num_in_flight_auctions", _int(1, 10**6), "an int from 1 to 1000000"),
    ("num_active_people", _int(1, 10**6), "an int from 1 to 1000000"),
    ("avg_person_byte_size", _int(1, 10**5), "an int from 1 to 100000"),
    ("avg_auction_byte_size", _int(1, 10**5), "an int from 1 to 100000"),
    ("avg_bid_byte_size", _int(1, 10**5), "an int from 1 to 100000"),
    ("out_of_order_group_size", _int(1, 10**6), "an int from 1 to 1000000"),
    ("watermark_delay_ms", _int(0, 10**9), "an int of milliseconds from 0 to 1e9"),
]
