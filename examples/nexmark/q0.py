"""q0, pass-through: every bid, as it came. What reading and writing cost, and nothing else."""

from __future__ import annotations

from typing import Any

from examples.nexmark.common import EVENTS, answer, events
from peer.job.flow import Flow

COLUMNS = ("auction", "bidder", "price", "dateTime", "extra")
SQL = 'SELECT auction, bidder, price, "dateTime", extra FROM bid'


def passed(event: dict[str, Any]) -> dict[str, Any] | None:
    if event["kind"] != "bid":
        return None
    return {column: event[column] for column in COLUMNS}


def flow(count: int = EVENTS, out: str = "out/nexmark/q0", **settings: Any) -> Flow:
    built, read = events("nexmark q0", count, **settings)
    answer(read.map("bids", passed), out)
    return built


job = flow()
