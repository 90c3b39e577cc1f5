"""q0, pass-through: every bid, as it came. What reading and writing cost, and nothing else."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from examples.nexmark.common import EVENTS, answer, events, of_kind
from peer.job.flow import Flow

COLUMNS = ("auction", "bidder", "price", "dateTime", "extra")
SQL = 'SELECT auction, bidder, price, "dateTime", extra FROM bid'


def passed(events: pa.RecordBatch) -> pa.RecordBatch:
    return of_kind(events, "bid", COLUMNS)


def flow(count: int = EVENTS, out: str = "out/nexmark/q0", **settings: Any) -> Flow:
    built, read = events("nexmark q0", count, **settings)
    answer(read.map("bids", passed, engine="arrow"), out)
    return built


job = flow()
