"""The keyed-state benchmark's workload (bench/state.py), shared by the engine and Bytewax so each
runs the very same code: events over K keys, each adding one to its key's running count.

Event i's key is ``(i * STRIDE) % K``: STRIDE is a prime that divides no K used here, so every
run of K consecutive events touches every key once. The first K events fill the state; each
epoch after that changes as many keys as it has events (until an epoch has more than K). A
key's count after the run is its number of events, so the sum of every count emitted is known
beforehand (``expected_sum``): each side's output sums the counts it receives, and the bench
checks the sum.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.workload import CountingOutput, Marker, NumberedInput

if TYPE_CHECKING:
    from peer.plugins import Recovery
    from peer.plugins.splits import Splits
    from peer.values.epoch import Epoch

STRIDE = 7919


def key_of(i: int, keys: int) -> int:
    return (i * STRIDE) % keys


def expected_sum(events: int, keys: int) -> int:
    """The sum of the counts emitted for ``events`` events over ``keys`` keys: key k counts
    1, 2, ..., n_k, where n_k is q or q + 1."""
    q, r = divmod(events, keys)
    return (keys - r) * q * (q + 1) // 2 + r * (q + 1) * (q + 2) // 2


class KeyedCount:
    """Each event's key with its running count, in keyed state the engine keeps."""

    def open(self, state: Any) -> None:
        self.count = state.value_state("count", default=0)

    def __call__(self, segment: dict[str, Any]) -> dict[str, Any]:
        n = self.count.get() + 1
        self.count.set(n)
        return {"key": segment["key"], "count": n}


class PaddedCount(KeyedCount):
    """``KeyedCount`` holding the environment's BENCH_STATE_PAD_BYTES (1,024 if unset) of
    incompressible bytes per key besides, written when the key is first seen: a state many
    times larger than its counts, for the state held against the process's memory."""

    def open(self, state: Any) -> None:
        super().open(state)
        self.pad = state.value_state("pad")
        self.pad_bytes = int(os.environ.get("BENCH_STATE_PAD_BYTES", "1024"))

    def __call__(self, segment: dict[str, Any]) -> dict[str, Any]:
        out = super().__call__(segment)
        if out["count"] == 1:
            self.pad.set(os.urandom(self.pad_bytes))
        return out


class KeyedInput(NumberedInput):
    """Events made as they are polled."""

    def __init__(self, count: int, keys: int, splits: Splits, slot: int, marks: str | None) -> None:
        super().__init__(count, splits, slot, marks)
        self.keys = keys

    def poll(self, limit: int) -> list[dict[str, Any]]:
        keys = self.keys
        return [{"key": key_of(i, keys)} for run in self._take(limit) for i in run]


def keyed_input(task: Any, slot: int, slots: int, *, splits: Splits) -> KeyedInput:
    """Plugin factory, named in jobs as ``bench.state_fns:keyed_input``."""
    params = task.params
    return KeyedInput(int(params["count"]), int(params["keys"]), splits, slot, params.get("marks"))


class SummingOutput(CountingOutput):
    """Sums the counts it is given; its checkpoint is how many events and what sum it has
    written, so both go on across recoveries. With ``marks``, it notes its writes there, and
    its sum in ``sum-<slot>.json`` when it closes; with ``passing``, the time its writes went
    past that many events (the fill's, for the rate after it)."""

    def __init__(self, slot: int, marks: str | None, passing: int = 0) -> None:
        self.marker = Marker(marks, "write", slot, passing)
        self.staged, self.staged_sum, self.sum = 0, 0, 0

    def recover(self, recovery: Recovery) -> None:
        self.written, self.sum = recovery.checkpoint or (0, 0)
        self.marker.items = self.written

    def checkpoint(self, epoch: Epoch) -> tuple[int, int]:
        return self.written, self.sum

    def prepare(self, segments: list[dict[str, Any]]) -> None:
        self.staged += len(segments)
        self.staged_sum += sum(s["count"] for s in segments)

    def write(self) -> bool:
        self.written += self.staged
        self.sum += self.staged_sum
        self.marker.handled(self.staged)
        self.staged = self.staged_sum = 0
        return True

    def close(self) -> None:
        self.marker.close()
        if self.marker.directory is not None:
            Path(self.marker.directory, f"sum-{self.marker.slot}.txt").write_text(str(self.sum))


def summing_output(task: Any, slot: int, slots: int) -> SummingOutput:
    """Plugin factory, named in jobs as ``bench.state_fns:summing_output``."""
    return SummingOutput(slot, task.params.get("marks"), int(task.params.get("passing", 0)))
