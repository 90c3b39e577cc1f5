"""q6, average selling price by seller: for each auction a seller closes, the average of the
winning bids of that seller's last 10 auctions closed, that one included.

The winning bids are found as q4 finds them (an interval join of auctions and their bids, the
highest per auction once the watermark has passed its end). "Last" needs an order per seller
that does not depend on which peer sent what first: the winning bids are grouped by seller in a
window of one millisecond at each auction's end, which sends a seller's auctions once the
watermark has passed their end, in the order of their ends (those that end together by id),
and all of a seller's come from the one peer that holds the seller. A keyed function then
keeps each seller's last 10 in its keyed state and sends their average with each."""

from __future__ import annotations

from typing import Any

from examples.nexmark.common import EVENTS, answer, events
from examples.nexmark.q4 import winning_bids
from peer.job.flow import Flow
from peer.state.keyed import KeyedState

LAST = 10
COLUMNS = ("seller", "auction", "average")
SQL = f"""
WITH Q AS (SELECT A.id AS auction, A.seller, A.expires, MAX(B.price) AS final
           FROM auction A, bid B
           WHERE A.id = B.auction AND B."dateTime" BETWEEN A."dateTime" AND A.expires
           GROUP BY A.id, A.seller, A.expires)
SELECT seller, auction, AVG(final) OVER (PARTITION BY seller ORDER BY expires, auction
                                         ROWS BETWEEN {LAST - 1} PRECEDING AND CURRENT ROW)
FROM Q
"""


def in_order(fired: dict[str, Any]) -> list[dict[str, Any]]:
    """A seller's auctions that ended at one millisecond, by id."""
    return sorted(fired["value"], key=lambda row: row["auction"])


class LastAuctions:
    """Each seller's last ``LAST`` winning bids, and their average with each new one."""

    def open(self, state: KeyedState) -> None:
        self.finals = state.list_state("finals")

    def __call__(self, row: dict[str, Any]) -> dict[str, Any]:
        held = [*self.finals.get(), row["final"]][-LAST:]
        self.finals.update(held)
        return {"seller": row["seller"], "auction": row["auction"],
                "average": sum(held) / len(held)}  # fmt: skip


def flow(count: int = EVENTS, out: str = "out/nexmark/q6", **settings: Any) -> Flow:
    built, read = events("nexmark q6", count, **settings)
    ordered = winning_bids(read).map("ordered", group_by_key="seller")
    ordered.window("ends", "fixed", key="expires", range=1).trigger(
        "watermark", refinement="discarding", emit=in_order
    )
    averaged = ordered.map("last", LastAuctions, group_by_key="seller")
    answer(averaged, out)
    return built


job = flow()
