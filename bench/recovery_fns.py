"""The recovery benchmark's job code (bench/recovery.py): a keyed input, two stateful keyed fns
and an output that notes when each record arrives.

- ``keyed_input``: records ``{"seq": i, "key": "k<i % keys>"}`` for i below ``params.count``,
  made as they are polled. With ``params.rate`` it hands out only the records due by then, in
  ticks of TICK seconds from its first poll; that start is part of its checkpoint, so after a
  rollback it catches up with the time lost, as a source with a backlog would.
- ``Count``: a count per key, the throughput run's fn; its snapshot is the counts.
- ``Hold``: ``Count`` plus a block of STATE_BYTES (the environment's
  BENCH_RECOVERY_STATE_BYTES, 32 MiB by default) of deterministic, incompressible bytes, kept in
  every snapshot: the state a slot restores. Each record it emits says which process made it
  (``pid``) and when (``at``, the wall clock read directly: a note for the bench, not state).
- ``KeyedHold``: the same in keyed state the engine keeps: a count and a block per key, the
  blocks of a slot's keys adding up to about STATE_BYTES.
- ``stamped_output``: appends one line per record, ``arrival seq key pid at``, to a file of its
  own in ``params.dir``, the arrival being the wall time of the write.

With ``params.marks`` the input notes its reads there as bench/workload.py's inputs do, so the
throughput run times it from the first read to the last write (``discarding_output``'s marks).

Jobs name these as ``bench.recovery_fns:Count`` and so on (the repository root is on sys.path).
"""

from __future__ import annotations

import os
import random
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.workload import NumberedInput, splits_of

if TYPE_CHECKING:
    from peer.plugins import Recovery
    from peer.values.epoch import Epoch

Segment = dict[str, Any]
TICK = 0.05
"""Seconds between the paced input's hand-outs: batches of rate * TICK records, not of one."""
STATE_BYTES = int(os.environ.get("BENCH_RECOVERY_STATE_BYTES", str(32 * 1024 * 1024)))
KEY_BYTES = int(os.environ.get("BENCH_RECOVERY_KEY_BYTES", "0"))
PID = os.getpid()


class KeyedInput(NumberedInput):
    """Keyed records, paced at ``rate`` per second in all (0: as fast as polled); its
    checkpoint is its splits' positions and the pace's start, so it keeps its number of
    peers (its factory takes no splits)."""

    def __init__(
        self, count: int, keys: int, rate: float, slot: int, slots: int, *, marks: str | None
    ) -> None:
        super().__init__(count, splits_of(slot, slots), slot, marks)
        self.keys, self.rate, self.start = keys, rate, 0.0

    def recover(self, recovery: Recovery) -> None:
        if recovery.checkpoint is not None:
            positions, self.start = recovery.checkpoint
            self.reading = self._reading(positions)

    def poll(self, limit: int) -> list[Segment]:
        due = None
        if self.rate:
            now = time.time()
            if not self.start:
                self.start = now
            due = int((now - self.start) // TICK * TICK * self.rate) + 1
        keys = self.keys
        return [{"seq": i, "key": f"k{i % keys}"} for run in self._take(limit, due) for i in run]

    def checkpoint(self, epoch: Epoch) -> list[Any]:
        return [self.reading.checkpoint(), self.start]


def keyed_input(task: Any, slot: int, slots: int) -> KeyedInput:
    """Plugin factory, named in jobs as ``bench.recovery_fns:keyed_input``."""
    p = task.params
    rate = float(p.get("rate", 0))
    return KeyedInput(int(p["count"]), int(p["keys"]), rate, slot, slots, marks=p.get("marks"))


class Count:
    """A count per key: each record goes on with its key's count so far."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def __call__(self, segment: Segment) -> Segment:
        key = segment["key"]
        n = self.counts.get(key, 0) + 1
        self.counts[key] = n
        return {**segment, "n": n}

    def snapshot(self) -> dict[str, Any]:
        return {"counts": self.counts}

    def restore(self, snapshots: list[Any], mine: Any) -> None:
        for snapshot in snapshots:
            self.counts.update((k, n) for k, n in snapshot["counts"].items() if mine(k))


class Hold(Count):
    """``Count`` holding STATE_BYTES more: made on the first snapshot unless restored, and
    taken back from the snapshot of the slot whose keys are this one's."""

    def __init__(self) -> None:
        super().__init__()
        self.block: bytes | None = None
        self.probe: str | None = None
        """A key this slot holds: which snapshot's block is its own, when all are restored."""

    def __call__(self, segment: Segment) -> Segment:
        out = super().__call__(segment)
        if self.probe is None:
            self.probe = segment["key"]
        return {**out, "pid": PID, "at": time.time()}

    def snapshot(self) -> dict[str, Any]:
        if self.block is None:
            self.block = random.Random(0).randbytes(STATE_BYTES)
        return {"counts": self.counts, "probe": self.probe, "block": self.block}

    def restore(self, snapshots: list[Any], mine: Any) -> None:
        super().restore(snapshots, mine)
        for snapshot in snapshots:
            probe = snapshot.get("probe")
            if probe is not None and mine(probe):
                self.block, self.probe = snapshot["block"], probe


class KeyedHold:
    """``Hold`` in keyed state the engine keeps (peer.state.keyed): each key's count, and a
    block of KEY_BYTES (the environment's BENCH_RECOVERY_KEY_BYTES: a slot's share of the state
    spread over its keys), incompressible, made when the key is first seen. A restore reads the
    key groups a slot owns and nothing else."""

    def open(self, state: Any) -> None:
        self.count = state.value_state("count", default=0)
        self.block = state.value_state("block")

    def __call__(self, segment: Segment) -> Segment:
        key = segment["key"]
        n = self.count.get() + 1
        self.count.set(n)
        if n == 1:
            self.block.set(random.Random(key).randbytes(KEY_BYTES))
        return {**segment, "n": n, "pid": PID, "at": time.time()}


class StampedOutput:
    """Notes every record it writes with the wall time of the write; its checkpoint is the
    count written."""

    def __init__(self, directory: str) -> None:
        self.path = Path(directory) / f"{PID}-{uuid.uuid4().hex}.txt"
        self.file = self.path.open("a")
        self.staged: list[Segment] = []
        self.written = 0

    def recover(self, recovery: Recovery) -> None:
        self.written = recovery.checkpoint or 0

    def prepare(self, segments: list[Segment]) -> None:
        self.staged.extend(segments)

    def write(self) -> bool:
        now = time.time()
        self.file.write(
            "".join(f"{now:.4f} {s['seq']} {s['key']} {s['pid']} {s['at']:.4f}\n"
                    for s in self.staged)
        )  # fmt: skip
        self.file.flush()
        self.written += len(self.staged)
        self.staged = []
        return True

    def checkpoint(self, epoch: Epoch) -> int:
        return self.written

    def synced(self) -> bool:
        return True

    def committed(self, epoch: Epoch) -> None:
        return None

    def close(self) -> None:
        self.file.close()


def stamped_output(task: Any, slot: int, slots: int) -> StampedOutput:
    """Plugin factory, named in jobs as ``bench.recovery_fns:stamped_output``."""
    return StampedOutput(task.params["dir"])
