"""The word count's code: split lines into words, and count them per word."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any


def split(segment: dict[str, Any]) -> list[dict[str, str]]:
    return [{"word": word.strip(".,;:!?\"'()").lower()} for word in segment["line"].split()]


class Count:
    """Counts the words routed to this peer (grouped by word, so each word has one counter)
    and emits the totals once its input is finished. Its counts are part of the job's
    checkpoints, so a failure loses none of them."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def __call__(self, segment: dict[str, str]) -> None:
        if segment["word"]:
            self.counts[segment["word"]] += 1

    def flush(self) -> list[dict[str, Any]]:
        return [{"word": w, "count": n} for w, n in sorted(self.counts.items())]

    def snapshot(self) -> dict[str, int]:
        return dict(self.counts)

    def restore(self, snapshots: list[dict[str, int]], keep: Callable[[str], bool]) -> None:
        """Every peer's counts from the checkpoint, keeping the words now routed here."""
        for counts in snapshots:
            self.counts.update({w: n for w, n in counts.items() if keep(w)})
