"""q2, selection: the bids on every 123rd auction, with their prices."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from examples.nexmark.common import EVENTS, answer, bid, events
from peer.job.flow import Flow

COLUMNS = ("auction", "price")
SQL = "SELECT auction, price FROM bid WHERE auction % 123 = 0"


def selected(events: pa.RecordBatch) -> pa.RecordBatch:
    """The bids on auctions whose ids 123 divides (ids are positive: truncation is floor)."""
    bids = bid(events).select(list(COLUMNS))
    auction = bids["auction"]
    return bids.filter(pc.equal(auction, pc.multiply(pc.divide(auction, 123), 123)))


def flow(count: int = EVENTS, out: str = "out/nexmark/q2", **settings: Any) -> Flow:
    built, read = events("nexmark q2", count, **settings)
    answer(read.map("selected", selected, engine="arrow"), out)
    return built


job = flow()
