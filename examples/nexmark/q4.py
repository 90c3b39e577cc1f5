"""q4, average price per category: the average, per category, of the winning bids of its
auctions, a winning bid being an auction's highest among those made while it was open.

An interval join pairs each auction with the bids on it from its start to its end, both
included; each pair goes out as soon as its second row comes. The pairs are grouped by
auction, in a window of one millisecond at the auction's end, so that the highest bid of each
goes out once the watermark has passed the end, when no bid on it is still to come. Those
winning bids are averaged per category in a global window, which answers when the input
ends."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from examples.nexmark.common import EVENTS, answer, bid, events, of_kind
from peer.job.flow import Flow, Stream

COLUMNS = ("category", "average")
SQL = """
SELECT Q.category, AVG(Q.final) AS average
FROM (SELECT MAX(B.price) AS final, A.category
      FROM auction A, bid B
      WHERE A.id = B.auction AND B."dateTime" BETWEEN A."dateTime" AND A.expires
      GROUP BY A.id, A.category) Q
GROUP BY Q.category
"""


def auction(events: pa.RecordBatch) -> pa.RecordBatch:
    return of_kind(events, "auction", ("id", "category", "seller", "dateTime", "expires"))


def priced(pair: dict[str, Any]) -> dict[str, Any]:
    """A bid made while its auction was open, with the auction's category, seller and end."""
    auction, bid = pair["left"], pair["right"]
    return {"auction": auction["id"], "category": auction["category"],
            "seller": auction["seller"], "expires": auction["expires"],
            "price": bid["price"]}  # fmt: skip


def final(fired: dict[str, Any]) -> dict[str, Any]:
    """An auction's winning bid, with its category, seller (the key's fields) and end."""
    auction, category, seller = fired["key"]
    return {"auction": auction, "category": category, "seller": seller,
            "expires": fired["start"], "final": fired["value"]}  # fmt: skip


def winning_bids(read: Stream) -> Stream:
    """Each auction's winning bid, once the watermark has passed its end: an interval join of
    the auctions with the bids made while they were open, the highest per auction kept in a
    window of one millisecond at its end (q4's and q6's first steps)."""
    auctions = read.map("auctions", auction, engine="arrow")
    bids = read.map("bids", bid, engine="arrow")
    won = auctions.join("won", bids, "interval", key="id", other_key="auction",
                        time="dateTime", lower=0, until="expires", emit=priced)  # fmt: skip
    finals = won.map("finals", group_by_key=["auction", "category", "seller"])
    finals.window("highest", "fixed", key="expires", range=1, aggregation="max",
                  field="price").trigger("watermark", refinement="discarding",
                                         emit=final)  # fmt: skip
    return finals


def average(fired: dict[str, Any]) -> dict[str, Any]:
    return {"category": fired["key"], "average": fired["value"]}


def flow(count: int = EVENTS, out: str = "out/nexmark/q4", **settings: Any) -> Flow:
    built, read = events("nexmark q4", count, **settings)
    averages = winning_bids(read).map("averages", group_by_key="category")
    averages.window("per-category", "global", aggregation="average",
                    field="final").trigger("watermark", emit=average)  # fmt: skip
    answer(averages, out)
    return built


job = flow()
