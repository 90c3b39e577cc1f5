"""q1, currency conversion: every bid with its price in euros, 0.908 of its dollars (cents
times 908, over 1,000: one rounding, as the oracle's)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from examples.nexmark.common import EVENTS, answer, events, of_kind
from peer.job.flow import Flow

COLUMNS = ("auction", "bidder", "price", "dateTime", "extra")
SQL = """SELECT auction, bidder, CAST(price * 908 AS DOUBLE) / 1000 AS price, "dateTime", extra
FROM bid"""


def in_euros(events: pa.RecordBatch) -> pa.RecordBatch:
    """The bids, each price as a double: its cents times 908 (exact in a double), over 1,000."""
    bids = of_kind(events, "bid", COLUMNS)
    euros = pc.divide(pc.cast(pc.multiply(bids["price"], 908), pa.float64()), 1000.0)
    return bids.set_column(COLUMNS.index("price"), "price", euros)


def flow(count: int = EVENTS, out: str = "out/nexmark/q1", **settings: Any) -> Flow:
    built, read = events("nexmark q1", count, **settings)
    answer(read.map("euros", in_euros, engine="arrow"), out)
    return built


job = flow()
