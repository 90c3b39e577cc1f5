"""q5, hot items: in each 10 s window of event time, sliding every 2 s, the auctions with the
most bids (every one of them, where several tie).

Bids are counted per auction in sliding windows; each count goes out once the watermark has
passed its window's end, and the counts are grouped by that end, where a ``top`` window of one
keeps the greatest (and its ties) and sends them once the watermark has passed the end's
2 s extent, by when every count of that end has come."""

from __future__ import annotations

from typing import Any

from examples.nexmark.common import EVENTS, answer, bid, events
from peer.job.flow import Flow

RANGE_MS, SLIDE_MS = 10_000, 2_000
COLUMNS = ("auction", "num")
SQL = f"""
WITH w AS (SELECT b.auction, ("dateTime" // {SLIDE_MS}) * {SLIDE_MS} - r.k * {SLIDE_MS} AS start
           FROM bid b CROSS JOIN range(0, {RANGE_MS // SLIDE_MS}) r(k)),
     c AS (SELECT auction, start, COUNT(*) AS num FROM w GROUP BY auction, start),
     m AS (SELECT start, MAX(num) AS maxn FROM c GROUP BY start)
SELECT c.auction, c.num FROM c JOIN m ON c.start = m.start AND c.num >= m.maxn
"""


def counted(fired: dict[str, Any]) -> dict[str, Any]:
    return {"auction": fired["key"], "end": fired["end"], "num": fired["value"]}


def end_of(count: dict[str, Any]) -> int:
    return count["end"]


def hottest(fired: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"auction": count["auction"], "num": count["num"]} for count in fired["value"]]


def flow(count: int = EVENTS, out: str = "out/nexmark/q5", **settings: Any) -> Flow:
    built, read = events("nexmark q5", count, **settings)
    bids = read.map("bids", bid, engine="arrow").map("counts", group_by_key="auction")
    bids.window("bids", "sliding", key="dateTime", range=RANGE_MS, slide=SLIDE_MS,
                aggregation="count").trigger("watermark", refinement="discarding",
                                             emit=counted)  # fmt: skip
    hot = bids.map("hottest", group_by_fn=end_of)
    hot.window("most", "fixed", key="end", range=SLIDE_MS, aggregation="top", field="num",
               top=1).trigger("watermark", refinement="discarding", emit=hottest)  # fmt: skip
    answer(hot, out)
    return built


job = flow()
