"""Code the job tests name by dotted path: the word count's split, paced so a job is still
running when a test kills a group, and marking on disk that work has begun."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from examples.wordcount.words import split


def split_slowly(segment: dict[str, Any]) -> list[dict[str, str]]:
    """The pace is the workload's, not a wait for anything: the test waits on the marker."""
    marker = os.environ.get("ONYX_TEST_STARTED")
    if marker:
        Path(marker).touch()
    time.sleep(0.001)
    return split(segment)


def pass_slowly(segment: dict[str, Any]) -> dict[str, Any]:
    """A segment as it came, a few milliseconds later: a job of a few thousand segments runs
    for seconds, long enough to take a savepoint of it half way."""
    time.sleep(0.003)
    return segment


class RunningCount:
    """Each event with its user's running count, in keyed state the engine keeps; paced by
    ONYX_TEST_PACE seconds per event (the workload's pace, not a wait for anything)."""

    def __init__(self) -> None:
        self.pace = float(os.environ.get("ONYX_TEST_PACE", "0"))

    def open(self, state: Any) -> None:
        self.count = state.value_state("count", default=0)

    def __call__(self, segment: dict[str, Any]) -> dict[str, Any]:
        if self.pace:
            time.sleep(self.pace)
        n = self.count.get() + 1
        self.count.set(n)
        return {**segment, "count": n}


class KeepsEverything:
    """32 KiB more of its user's list state per event: state that grows fast, to fill a
    disk."""

    def open(self, state: Any) -> None:
        self.kept = state.list_state("kept")

    def __call__(self, segment: dict[str, Any]) -> dict[str, Any]:
        self.kept.add("x" * 32_768)
        return segment
