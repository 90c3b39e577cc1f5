"""Job code for the replay tests: a fn whose every output depends on the order of its inputs
and on what it read from the clock and from randomness, through its task's context."""

from __future__ import annotations

from typing import Any

from peer import context


class Ordered:
    """A running hash of every segment in the order taken, stamped with a clock and a random
    read: any other order, or any other read, shows in its state and its output."""

    def __init__(self) -> None:
        self.seen = 0
        self.digest = 7

    def __call__(self, segment: dict[str, Any]) -> dict[str, Any]:
        self.seen += 1
        self.digest = (self.digest * 31 + segment["v"] * 7 + len(segment["from"])) % 1_000_003
        return {
            "seen": self.seen,
            "digest": self.digest,
            "from": segment["from"],
            "at": context.now(),
            "draw": context.random(),
        }

    def snapshot(self) -> list[int]:
        return [self.seen, self.digest]

    def restore(self, snapshots: list[Any], mine: Any) -> None:
        self.seen, self.digest = snapshots[0]
