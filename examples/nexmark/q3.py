"""q3, local item suggestion: the auctions of category 10 whose sellers live in Oregon, Idaho
or California, with the seller's name, city and state.

A regular join of the people (those three states) and the auctions (category 10) on the
person's id and the seller: each pair goes out as soon as its second row comes, whichever
side that is. Each side's rows of a key are forgotten a day of event time after that side's
last row for the key."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from examples.nexmark.common import EVENTS, answer, events, of_kind
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


def local(events: pa.RecordBatch) -> pa.RecordBatch:
    """The people of the three states."""
    people = of_kind(events, "person", ("id", "name", "city", "state"))
    return people.filter(pc.is_in(people["state"], value_set=pa.array(STATES)))


def in_category(events: pa.RecordBatch) -> pa.RecordBatch:
    auctions = of_kind(events, "auction", ("id", "seller", "category"))
    return auctions.filter(pc.equal(auctions["category"], CATEGORY)).select(["id", "seller"])


def suggestion(pair: dict[str, Any]) -> dict[str, Any]:
    person = pair["left"]
    return {"name": person["name"], "city": person["city"], "state": person["state"],
            "id": pair["right"]["id"]}  # fmt: skip


def flow(count: int = EVENTS, out: str = "out/nexmark/q3", **settings: Any) -> Flow:
    built, read = events("nexmark q3", count, **settings)
    people = read.map("people", local, engine="arrow")
    auctions = read.map("auctions", in_category, engine="arrow")
    joined = people.join("suggestions", auctions, "regular", key="id", other_key="seller",
                         ttl=DAY_MS, emit=suggestion)  # fmt: skip
    answer(joined, out)
    return built


job = flow()
