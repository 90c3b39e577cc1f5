"""q7, highest bid: in each 10 s window of event time, every bid of its highest price.

Bids are grouped by their window (the index ``window`` the first step adds to each bid, so that
the windowed task reads its key from a column), a window's bids kept by a ``top`` window of one
(an arg-max that keeps ties), and sent once the watermark has passed the window's end. Nexmark's
SQL joins the bids back to each window's greatest price over ``dateTime BETWEEN end - 10 s AND
end``, so a bid exactly at a window's end counts for two windows there; here, as in the oracle's
SQL, a bid belongs to the one window its time falls in, start included, end excluded."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from examples.nexmark.common import EVENTS, answer, bid, events
from peer.job.flow import Flow

WINDOW_MS = 10_000
COLUMNS = ("auction", "price", "bidder", "dateTime", "extra")
SQL = f"""
WITH w AS (SELECT *, "dateTime" // {WINDOW_MS} AS win FROM bid),
     m AS (SELECT win, MAX(price) AS maxprice FROM w GROUP BY win)
SELECT w.auction, w.price, w.bidder, w."dateTime", w.extra
FROM w JOIN m ON w.win = m.win AND w.price = m.maxprice
"""


def windowed(events: pa.RecordBatch) -> pa.RecordBatch:
    """The bids, each with the index of its window, ``dateTime // WINDOW_MS``."""
    bids = bid(events)
    return bids.append_column("window", pc.divide(bids["dateTime"], WINDOW_MS))


def highest(fired: dict[str, Any]) -> list[dict[str, Any]]:
    return [{column: bid[column] for column in COLUMNS} for bid in fired["value"]]


def flow(count: int = EVENTS, out: str = "out/nexmark/q7", **settings: Any) -> Flow:
    built, read = events("nexmark q7", count, **settings)
    bids = read.map("bids", windowed, engine="arrow").map("highest", group_by_key="window")
    bids.window("max-price", "fixed", key="dateTime", range=WINDOW_MS, aggregation="top",
                field="price", top=1).trigger("watermark", refinement="discarding",
                                               emit=highest)  # fmt: skip
    answer(bids, out)
    return built


job = flow()
