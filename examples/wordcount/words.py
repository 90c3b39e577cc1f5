"""The word count's code: split lines into words, and say each word's total. The counting
itself is the job's window (job.yaml): the engine keeps one count per word."""

from __future__ import annotations

from typing import Any


def split(segment: dict[str, Any]) -> list[dict[str, str]]:
    """The line's words, in lower case without the punctuation around them; a token that is
    all punctuation is no word."""
    words = (token.strip(".,;:!?\"'()").lower() for token in segment["line"].split())
    return [{"word": word} for word in words if word]


def total(event: dict[str, Any]) -> dict[str, Any]:
    """A word's count, once the input has ended (the watermark passes the global window)."""
    return {"word": event["key"], "count": event["value"]}
