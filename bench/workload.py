"""The data-plane benchmark's workload, shared by every contender so each runs the very same code.

The job is linear: an input of small segments (``make_segment``), three functions that each
change one field (``f1``: count + 1, ``f2``: word upper-cased, ``f3``: ts + 1.0) and an output that
discards. The same computation on Arrow record batches is ``make_record_batch`` and ``arrow_f1``
.. ``arrow_f3`` (pyarrow.compute on whole columns). Every input makes its segments as it is read,
never beforehand, whoever reads it: the engine's plugins here, Bytewax's sources and the limit
loop in bench/baselines.py.

Jobs name these as ``bench.workload:f1`` and so on (the repository root is on sys.path).
``paced_input`` and ``latency_output`` are the latency run's: segments made at a steady rate,
each carrying the time it was due in ``created``, and an output noting how long ago that was.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:  # the engine's types, for the plugins' hints only: Bytewax's runs import this
    from peer.plugins import Recovery
    from peer.runtime.checkpoints import Epoch

Segment = dict[str, Any]
BASE_TS = 1700000000.0


def make_segment(i: int) -> Segment:
    """The i-th input segment: four small fields."""
    return {"id": i, "word": f"w{i % 1000}", "count": 0, "ts": BASE_TS + i}


# The three functions are pure: each returns a new segment and leaves its argument as it was, as
# a task's function must for a batch to be replayed after a failure.


def f1(segment: Segment) -> Segment:
    """count + 1."""
    return {**segment, "count": segment["count"] + 1}


def f2(segment: Segment) -> Segment:
    """word upper-cased."""
    return {**segment, "word": segment["word"].upper()}


def f3(segment: Segment) -> Segment:
    """ts + 1.0."""
    return {**segment, "ts": segment["ts"] + 1.0}


def expected(i: int) -> Segment:
    """The i-th segment as the output must see it."""
    return f3(f2(f1(make_segment(i))))


def sample(segment: Segment) -> Segment | None:
    """Every 1000th segment: keeps an output small while the job still does all the work."""
    return segment if segment["id"] % 1000 == 0 else None


# -- the same computation on Arrow record batches -------------------------------------------------


def make_record_batch(ids: range) -> pa.RecordBatch:
    """The segments ``ids`` as one record batch, made column by column: row k is
    ``make_segment(ids[k])``."""
    id_ = pa.array(ids, pa.int64())
    thousands = pc.multiply(pc.divide(id_, 1000), 1000)  # integer division: ids are >= 0
    word = pc.binary_join_element_wise("w", pc.cast(pc.subtract(id_, thousands), pa.string()), "")
    count = pa.repeat(pa.scalar(0, pa.int64()), len(ids))
    ts = pc.add(pc.cast(id_, pa.float64()), BASE_TS)
    return pa.record_batch([id_, word, count, ts], names=["id", "word", "count", "ts"])


def _replace(batch: pa.RecordBatch, name: str, column: pa.Array) -> pa.RecordBatch:
    return batch.set_column(batch.schema.get_field_index(name), name, column)


def arrow_f1(batch: pa.RecordBatch) -> pa.RecordBatch:
    """count + 1, on the whole column."""
    return _replace(batch, "count", pc.add(batch["count"], 1))


def arrow_f2(batch: pa.RecordBatch) -> pa.RecordBatch:
    """word upper-cased, on the whole column."""
    return _replace(batch, "word", pc.utf8_upper(batch["word"]))


def arrow_f3(batch: pa.RecordBatch) -> pa.RecordBatch:
    """ts + 1.0, on the whole column."""
    return _replace(batch, "ts", pc.add(batch["ts"], 1.0))


# -- the engine's input and output plugins --------------------------------------------------------


class SegmentInput:
    """Items ``slot``, ``slot + slots``, ... below ``count``, made as they are polled (rows, or
    one record batch per poll with ``arrow``); its checkpoint is the next item."""

    def __init__(self, count: int, slot: int, slots: int, arrow: bool = False) -> None:
        self.next, self.stop, self.step, self.arrow = slot, count, slots, arrow

    def recover(self, recovery: Recovery) -> None:
        if recovery.checkpoint is not None:
            self.next = recovery.checkpoint

    def poll(self, limit: int) -> list[Segment] | pa.RecordBatch:
        ids = range(self.next, min(self.next + limit * self.step, self.stop), self.step)
        self.next += len(ids) * self.step
        if self.arrow:
            return make_record_batch(ids)
        return [make_segment(i) for i in ids]

    def checkpoint(self, epoch: Epoch) -> int:
        return self.next

    def completed(self) -> bool:
        return self.next >= self.stop

    def synced(self) -> bool:
        return True

    def committed(self, epoch: Epoch) -> None:
        return None

    def close(self) -> None:
        return None


def segment_input(task: Any, slot: int, slots: int) -> SegmentInput:
    """Plugin factory, named in jobs as ``bench.workload:segment_input``."""
    return SegmentInput(int(task.params["count"]), slot, slots)


def arrow_input(task: Any, slot: int, slots: int) -> SegmentInput:
    """Plugin factory, named in jobs as ``bench.workload:arrow_input``: record batches."""
    return SegmentInput(int(task.params["count"]), slot, slots, arrow=True)


class PacedInput(SegmentInput):
    """``params.count`` segments at ``params.rate`` per second in all, from its first poll:
    item i is due ``i / rate`` seconds after it and carries that time in ``created`` (so time an
    item waits to be read counts as its latency too). Only the items due are handed out."""

    def __init__(self, count: int, rate: float, slot: int, slots: int) -> None:
        super().__init__(count, slot, slots)
        self.rate, self.start = rate, 0.0

    def poll(self, limit: int) -> list[Segment]:
        now = time.time()
        if not self.start:
            self.start = now
        due = min(self.stop, int((now - self.start) * self.rate) + 1)
        ids = range(self.next, min(due, self.next + limit * self.step), self.step)
        self.next += len(ids) * self.step
        return [{**make_segment(i), "created": self.start + i / self.rate} for i in ids]


def paced_input(task: Any, slot: int, slots: int) -> PacedInput:
    """Plugin factory, named in jobs as ``bench.workload:paced_input``."""
    return PacedInput(int(task.params["count"]), float(task.params["rate"]), slot, slots)


LATENCIES: dict[str, list[float]] = defaultdict(list)
"""Run name to the seconds from each segment's ``created`` to its write, in this process."""


class LatencyOutput:
    """Notes, for every segment it writes, the seconds since its ``created`` under
    ``params.run`` in ``LATENCIES``; keeps nothing else."""

    def __init__(self, run: str) -> None:
        self.run, self.staged, self.written = run, [], 0

    def recover(self, recovery: Recovery) -> None:
        self.written = recovery.checkpoint or 0

    def prepare(self, segments: list[Segment] | pa.RecordBatch) -> None:
        """Rows or an Arrow batch, as the task emits them: only ``created`` is read."""
        if isinstance(segments, pa.RecordBatch):
            self.staged.extend(segments.column("created").to_pylist())
        else:
            self.staged.extend(segment["created"] for segment in segments)

    def write(self) -> bool:
        now = time.time()
        LATENCIES[self.run].extend(now - created for created in self.staged)
        self.written += len(self.staged)
        self.staged = []
        return True

    def synced(self) -> bool:
        return True

    def checkpoint(self, epoch: Epoch) -> int:
        return self.written

    def committed(self, epoch: Epoch) -> None:
        return None

    def close(self) -> None:
        return None


def latency_output(task: Any, slot: int, slots: int) -> LatencyOutput:
    """Plugin factory, named in jobs as ``bench.workload:latency_output``."""
    return LatencyOutput(str(task.params["run"]))
