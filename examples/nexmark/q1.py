"""q1, currency conversion: every bid with its price in euros, 0.908 of its dollars (cents
times 908, over 1,000: one rounding, as the oracle's)."""

from __future__ import annotations

from typing import Any

from examples.nexmark.common import EVENTS, answer, events
from peer.job.flow import Flow

COLUMNS = ("auction", "bidder", "price", "dateTime", "extra")
SQL = """SELECT auction, bidder, CAST(price * 908 AS DOUBLE) / 1000 AS price, "dateTime", extra
FROM bid"""


def in_euros(event: dict[str, Any]) -> dict[str, Any] | None:
    if event["kind"] != "bid":
        return None
    return {"auction": event["auction"], "bidder": event["bidder"],
            "price": event["price"] * 908 / 1000, "dateTime": event["dateTime"],
            "extra": event["extra"]}  # fmt: skip


def flow(count: int = EVENTS, out: str = "out/nexmark/q1", **settings: Any) -> Flow:
    built, read = events("nexmark q1", count, **settings)
    answer(read.map("euros", in_euros), out)
    return built


job = flow()
