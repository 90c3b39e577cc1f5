"""q2, selection: the bids on every 123rd auction, with their prices."""

from __future__ import annotations

from typing import Any

from examples.nexmark.common import EVENTS, answer, events
from peer.job.flow import Flow

COLUMNS = ("auction", "price")
SQL = "SELECT auction, price FROM bid WHERE auction % 123 = 0"


def selected(event: dict[str, Any]) -> dict[str, Any] | None:
    if event["kind"] != "bid" or event["auction"] % 123:
        return None
    return {"auction": event["auction"], "price": event["price"]}


def flow(count: int = EVENTS, out: str = "out/nexmark/q2", **settings: Any) -> Flow:
    built, read = events("nexmark q2", count, **settings)
    answer(read.map("selected", selected), out)
    return built


job = flow()
