"""The Kafka-to-PostgreSQL job's code: each view passed to its page's windows, and each closed
window made a row of the table."""

from __future__ import annotations

from typing import Any


def view(segment: dict[str, Any]) -> dict[str, Any]:
    """A page view as read: the window counts it under its page."""
    return segment


def minute_row(event: dict[str, Any]) -> dict[str, Any]:
    """One row of ``page_views_per_minute``: a page, the minute's start (milliseconds since the
    epoch) and its views."""
    return {"page": event["key"], "minute": event["start"], "views": event["value"]}
