"""The clickstream pipeline's code: Spark cleans page views and joins them with the pages table,
the peers gather each visitor's views into visits (session windows), and each visit becomes one
row of the sessions table.

A visit ends after 30 minutes without a view. Visits close as event time passes them (the input's
watermark), so the table grows while the job runs; only committed epochs ever reach it.
"""

from __future__ import annotations

import datetime as dt
import functools
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F


def clean(df: DataFrame, params: dict[str, Any]) -> DataFrame:
    """Drops bots and views without a visitor, writes every page one way (lower case, no
    trailing slash) and adds its section from the pages table (``other`` if it has none)."""
    page = F.regexp_replace(F.lower("page"), "(.)/$", "$1")
    views = df.filter(F.col("user_id").isNotNull() & ~F.lower("user_agent").rlike("bot"))
    return (
        views.withColumn("page", page)
        .join(F.broadcast(_pages(df.sparkSession, params["pages"])), "page", "left")
        .select(
            "user_id",
            "ts",
            "page",
            F.coalesce("section", F.lit("other")).alias("section"),
            "duration_ms",
        )
    )


@functools.cache
def _pages(spark: SparkSession, path: str) -> DataFrame:
    """The pages table, read once per session and kept: every batch joins with it."""
    return spark.read.option("header", "true").csv(path).cache()


def event_time(view: dict[str, Any]) -> float:
    """The input's watermark follows the views' times: each file is in time order."""
    return view["ts"]


def view(segment: dict[str, Any]) -> dict[str, Any]:
    """What the sessions task keeps of a view."""
    return segment


class Visit:
    """A session window's aggregation: views, time spent, first and last view, and views per
    section. Merging two visits (a view that bridges them) adds them up."""

    def init(self, window: Any) -> dict[str, Any]:
        return {"views": 0, "duration_ms": 0, "first": None, "last": None, "sections": {}}

    def create_state_update(self, window: Any, state: Any, segment: dict[str, Any]) -> Any:
        return segment

    def apply_state_update(self, window: Any, state: dict[str, Any], view: Any) -> dict[str, Any]:
        one = {
            "views": 1,
            "duration_ms": view["duration_ms"],
            "first": view["ts"],
            "last": view["ts"],
            "sections": {view["section"]: 1},
        }
        return self.merge(window, state, one)

    def merge(self, window: Any, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        sections = dict(a["sections"])
        for name, views in b["sections"].items():
            sections[name] = sections.get(name, 0) + views
        times = [t for t in (a["first"], a["last"], b["first"], b["last"]) if t is not None]
        return {
            "views": a["views"] + b["views"],
            "duration_ms": a["duration_ms"] + b["duration_ms"],
            "first": min(times),
            "last": max(times),
            "sections": sections,
        }

    def value(self, state: dict[str, Any]) -> dict[str, Any]:
        return state


visit = Visit()


def session_row(event: dict[str, Any]) -> dict[str, Any]:
    """One row of the sessions table for a visit the watermark closed."""
    state = event["value"]
    top = max(sorted(state["sections"]), key=lambda name: state["sections"][name])
    start = state["first"]
    return {
        "user_id": event["key"],
        "day": dt.datetime.fromtimestamp(start, dt.UTC).date().isoformat(),
        "start": start,
        "end": state["last"],
        "views": state["views"],
        "duration_ms": state["duration_ms"],
        "top_section": top,
    }
