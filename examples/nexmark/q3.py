"""q3, local item suggestion: the auctions of category 10 whose sellers live in Oregon, Idaho
or California, with the seller's name, city and state.

A regular join of the people (those three states) and the auctions (category 10) on the
person's id and the seller: each pair goes out as soon as its second row comes, whichever
side that is. Each side's rows of a key are forgotten a day of event time after that side's
last row for the key."""

from __future__ import annotations

from typing import Any

from examples.nexmark.common import EVENTS, answer, events
from peer.job.flow import Flow

STATES = ("OR", "ID", "CA")
CATEGORY = 10
DAY_MS = 86_400_000
COLUMNS = ("name", "city", "state", "id")
SQL = f"""
SELECT P.name, P.city, P.state, A.id
FROM auction AS A INNER JOIN person AS P ON A.seller = P.id
WHERE A.category = {CATEGORY} AND P.state IN {STATES}
"""


def local(event: dict[str, Any]) -> dict[str, Any] | None:
    """A person of one of the three states."""
    if event["kind"] != "person" or event["state"] not in STATES:
        return None
    return {"id": event["id"], "name": event["name"], "city": event["city"],
            "state": event["state"]}  # fmt: skip


def in_category(event: dict[str, Any]) -> dict[str, Any] | None:
    if event["kind"] != "auction" or event["category"] != CATEGORY:
        return None
    return {"id": event["id"], "seller": event["seller"]}


def suggestion(pair: dict[str, Any]) -> dict[str, Any]:
    person = pair["left"]
    return {"name": person["name"], "city": person["city"], "state": person["state"],
            "id": pair["right"]["id"]}  # fmt: skip


def flow(count: int = EVENTS, out: str = "out/nexmark/q3", **settings: Any) -> Flow:
    built, read = events("nexmark q3", count, **settings)
    people = read.map("people", local)
    auctions = read.map("auctions", in_category)
    joined = people.join("suggestions", auctions, "regular", key="id", other_key="seller",
                         ttl=DAY_MS, emit=suggestion)  # fmt: skip
    answer(joined, out)
    return built


job = flow()
