"""The large-state chaos job's per-segment code, paced as tests.chaos.pacing paces: each user's
visits counted, and a block of
BLOCK_BYTES (the environment's ONYX_TEST_BLOCK_BYTES) held in keyed state for each user from
its first visit on, so that the state grows with the users. A block is made from the user
alone: the same on every run and after every restore."""

from __future__ import annotations

import os
import random
from typing import Any

from tests.chaos.pacing import pace

BLOCK_BYTES = int(os.environ.get("ONYX_TEST_BLOCK_BYTES", "1024"))


def block_of(user: str) -> bytes:
    """BLOCK_BYTES of random bytes, seeded by ``user`` (so no store compresses them)."""
    return random.Random(user).randbytes(BLOCK_BYTES)


class Blocks:
    """Holds each user's block and visits; a segment leaves with the visits so far and the
    block's length, checked against what the state held."""

    def open(self, state: Any) -> None:
        self.visits = state.value_state("visits", default=0)
        self.block = state.value_state("block")

    def __call__(self, segment: dict[str, Any]) -> dict[str, Any]:
        pace(segment)
        n = self.visits.get() + 1
        self.visits.set(n)
        if n == 1:
            self.block.set(block_of(segment["user"]))
        elif self.block.get() != block_of(segment["user"]):
            raise ValueError(f"user {segment['user']}: the block held is not the one written")
        return {**segment, "visits": n}
