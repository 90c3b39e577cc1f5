"""q8, monitor new users: the people who opened an auction in the same 10 s window of event
time as they registered, with the window's start.

As Nexmark's SQL groups each side by its window before it joins, the auctions are first counted
per seller and window, which sends one row per seller that sold in a window, timed at the
window's last millisecond (so it is in that window, and not behind the watermark that closed
it). The people and those rows then meet in a window join on the person's id and the seller,
and each pair goes out once the watermark has passed the window's end."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from examples.nexmark.common import EVENTS, answer, events, of_kind
from peer.job.flow import Flow

WINDOW_MS = 10_000
COLUMNS = ("id", "name", "starttime")
SQL = f"""
WITH p AS (SELECT id, name, ("dateTime" // {WINDOW_MS}) * {WINDOW_MS} AS starttime
           FROM person GROUP BY id, name, starttime),
     a AS (SELECT seller, ("dateTime" // {WINDOW_MS}) * {WINDOW_MS} AS starttime
           FROM auction GROUP BY seller, starttime)
SELECT p.id, p.name, p.starttime FROM p JOIN a ON p.id = a.seller AND p.starttime = a.starttime
"""


def person(events: pa.RecordBatch) -> pa.RecordBatch:
    return of_kind(events, "person", ("id", "name", "dateTime"))


def auction(events: pa.RecordBatch) -> pa.RecordBatch:
    """The auctions, with their seller and time."""
    return of_kind(events, "auction", ("seller", "dateTime"))


def seller(fired: dict[str, Any]) -> dict[str, Any]:
    """A seller that sold in a window, timed at the window's last millisecond."""
    return {"seller": fired["key"], "dateTime": fired["end"] - 1}


def new_user(pair: dict[str, Any]) -> dict[str, Any]:
    person = pair["left"]
    return {"id": person["id"], "name": person["name"], "starttime": pair["start"]}


def flow(count: int = EVENTS, out: str = "out/nexmark/q8", **settings: Any) -> Flow:
    built, read = events("nexmark q8", count, **settings)
    people = read.map("people", person, engine="arrow")
    sold = read.map("auctions", auction, engine="arrow").map("sellers", group_by_key="seller")
    sold.window("sold", "fixed", key="dateTime", range=WINDOW_MS,
                aggregation="count").trigger("watermark", refinement="discarding",
                                             emit=seller)  # fmt: skip
    joined = people.join("new-users", sold, "window", key="id", other_key="seller",
                         time="dateTime", range=WINDOW_MS, emit=new_user)  # fmt: skip
    answer(joined, out)
    return built


job = flow()
