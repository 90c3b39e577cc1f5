"""Code for the late side output's test: event times as the input's watermark."""

from __future__ import annotations

from typing import Any


def time_of(row: dict[str, Any]) -> int:
    return row["t"]
