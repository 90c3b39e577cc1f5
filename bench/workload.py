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

The engine's throughput is timed as Bytewax's is (bench/baselines.py ``Seen.rate``): from the
first read of any input slot to the last write of any output slot. Its input plugins and its
discarding output (``discarding_output``) note those wall times when the job names a directory in
``params.marks``: each plugin instance, when closed, writes one ``Mark`` there as a JSON file, so
the bench reads them whichever process ran the slot; ``read_marks`` sums them up.
"""

from __future__ import annotations

import functools
import json
import os
import time
import uuid
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:  # the engine's types, for the plugins' hints only: Bytewax's runs import this
    from peer.plugins import Recovery
    from peer.plugins.splits import Numbered, Splits
    from peer.values.epoch import Epoch

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


WORDS = pa.array([f"w{k}" for k in range(1000)])
"""Every word an input makes, ``WORDS[i % 1000]`` for segment i."""


@functools.lru_cache(maxsize=8)
def _offsets(rows: int, step: int) -> pa.Array:
    """0, step, 2 step, ... for ``rows`` rows: the ids of a batch less its first."""
    return pa.array(range(0, rows * step, step), pa.int64())


def make_record_batch(ids: range) -> pa.RecordBatch:
    """The segments ``ids`` as one record batch, made column by column as a columnar source
    would (no Python object per row): row k is ``make_segment(ids[k])``."""
    return _made(_ids(ids))


def _ids(ids: range) -> pa.Array:
    return pc.add(_offsets(len(ids), ids.step), ids.start)


def _made(id_: pa.Array) -> pa.RecordBatch:
    """The segments of the ids ``id_``, one row each."""
    thousands = pc.multiply(pc.divide(id_, 1000), 1000)  # integer division: ids are >= 0
    word = WORDS.take(pc.subtract(id_, thousands))
    count = pa.repeat(pa.scalar(0, pa.int64()), len(id_))
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


# -- what the engine's plugins note for the bench ------------------------------------------------


@dataclass(frozen=True)
class Mark:
    """What one plugin instance of an input (``role`` "read") or output ("write") slot did: how
    many items, and the wall times of its first and last poll or write that handled any."""

    role: str
    slot: int
    items: int
    first: float
    last: float
    passed: float = 0.0
    """The wall time of the call that took the items handled past the marker's ``passing``
    (0.0: none did, or it was not asked)."""
    right: bool = True
    """Whether the last item an output wrote is what the workload makes of it (``expected``),
    as Bytewax's sink partitions are checked; inputs note True."""


class Marker:
    """A plugin's notes: the times of the calls that handled items, written as one ``Mark``
    file into ``directory`` (None: nothing is noted) when the plugin closes; with ``passing``,
    also the time the items handled went past that many."""

    def __init__(self, directory: str | None, role: str, slot: int, passing: int = 0) -> None:
        self.directory, self.role, self.slot, self.passing = directory, role, slot, passing
        self.items, self.first, self.last, self.passed = 0, 0.0, 0.0, 0.0

    def handled(self, items: int) -> None:
        """One call's items: the clock is read only when noting is on and there were items."""
        if self.directory is None or not items:
            return
        self.last = time.time()
        self.first = self.first or self.last
        self.items += items
        if self.passing and not self.passed and self.items > self.passing:
            self.passed = self.last

    def close(self, right: bool = True) -> None:
        """Written under another name and renamed, so a reader never sees half a file."""
        if self.directory is None or not self.last:
            return
        mark = Mark(self.role, self.slot, self.items, self.first, self.last, self.passed, right)
        name = f"{self.role}-{self.slot}-{uuid.uuid4().hex}.json"
        partial = Path(self.directory, f"{name}.partial")
        partial.write_text(json.dumps(asdict(mark)))
        os.replace(partial, Path(self.directory, name))


@dataclass(frozen=True)
class Marks:
    """The marks of one run: every instance's, and the figures they give."""

    marks: list[Mark]

    def of(self, role: str) -> list[Mark]:
        return sorted((m for m in self.marks if m.role == role), key=lambda m: (m.slot, m.first))

    def written(self) -> int:
        """Items written by the output slots: a slot restarted after a failure counts once, by
        its latest instance (an output's count goes on across recoveries)."""
        latest: dict[int, Mark] = {}
        for mark in self.of("write"):
            if mark.slot not in latest or mark.last > latest[mark.slot].last:
                latest[mark.slot] = mark
        return sum(m.items for m in latest.values())

    def seconds(self) -> float:
        """From the first read of any input slot to the last write of any output slot."""
        return max(m.last for m in self.of("write")) - min(m.first for m in self.of("read"))

    def check(self, count: int, who: str) -> None:
        """Every item written, and each output instance's last one right."""
        wrong = sorted(m.slot for m in self.of("write") if not m.right)
        if self.written() != count or wrong:
            raise AssertionError(
                f"{who} wrote {self.written()} of {count} segments; the last one wrong in "
                f"output slots {wrong}"
            )


def read_marks(directory: Path) -> Marks:
    """Every mark written into ``directory`` so far."""
    return Marks([Mark(**json.loads(f.read_text())) for f in sorted(directory.glob("*.json"))])


# -- the engine's input and output plugins --------------------------------------------------------


class NumberedInput:
    """What the bench's inputs share: the items numbered 0 .. ``count`` - 1, item i in split
    i % S of the task's max_parallelism S, a slot reading those of the splits it owns
    (peer.plugins.splits), handed out as they are polled, as runs of consecutive numbers. Its
    checkpoint is each owned split's position, so a job's input may run on another number of
    peers after a restore. With ``marks``, its polls are noted there (``Marker``). It has
    nothing to sync, publish or release."""

    def __init__(self, count: int, splits: Splits, slot: int, marks: str | None) -> None:
        self.count, self.splits = count, splits
        self.reading = self._reading(None)
        self.marker = Marker(marks, "read", slot)

    def _reading(self, checkpoint: Any) -> Numbered:
        from peer.plugins.splits import Numbered  # noqa: PLC0415  # Bytewax's runs lack it

        return Numbered(self.splits, self.count, checkpoint, ValueError)

    def recover(self, recovery: Recovery) -> None:
        self.reading = self._reading(recovery.checkpoint)

    def _take(self, limit: int, until: int | None = None) -> list[range]:
        """The next runs of at most ``limit`` items (below ``until``, given), now handed out."""
        runs = self.reading.take(limit, until)
        self.marker.handled(sum(map(len, runs)))
        return runs

    def checkpoint(self, epoch: Epoch) -> list[list[int]]:
        return self.reading.checkpoint()

    def completed(self) -> bool:
        return self.reading.completed()

    def synced(self) -> bool:
        return True

    def committed(self, epoch: Epoch) -> None:
        return None

    def close(self) -> None:
        self.marker.close()


def splits_of(slot: int, slots: int, splits: int | None = None) -> Splits:
    """The splits slot ``slot`` of ``slots`` owns, of ``splits`` (None: the default maximum
    parallelism): what the engine hands a splitting input's factory, for the bench's own uses
    of its inputs."""
    from peer.job.spec import DEFAULT_MAX_PARALLELISM  # noqa: PLC0415  # Bytewax's runs lack it
    from peer.plugins.splits import Splits  # noqa: PLC0415

    return Splits.of(slot, slots, splits or DEFAULT_MAX_PARALLELISM)


class SegmentInput(NumberedInput):
    """Segments made as they are polled (rows, or one record batch per poll with ``arrow``)."""

    def __init__(
        self, count: int, splits: Splits, slot: int, arrow: bool = False, marks: str | None = None
    ) -> None:
        super().__init__(count, splits, slot, marks)
        self.arrow = arrow

    def poll(self, limit: int) -> list[Segment] | pa.RecordBatch:
        runs = self._take(limit)
        if self.arrow:
            return record_batch_of(runs)
        return [make_segment(i) for run in runs for i in run]


def record_batch_of(runs: list[range]) -> pa.RecordBatch:
    """The segments of ``runs`` (of consecutive ids, as ``Numbered`` takes them) as one record
    batch, made once for all their ids: a slot that owns some of the splits reads a short run in
    every S ids, so a poll holds a hundred runs or more."""
    if len(runs) <= 1:
        return make_record_batch(runs[0] if runs else range(0))
    return _made(_consecutive(runs))


def _consecutive(runs: list[range]) -> pa.Array:
    """The ids of ``runs`` in a few calls whatever their number: a running sum of steps of 1,
    but at each run's first row the jump from the run before."""
    starts, jumps, rows, last = [], [], 0, 0
    for run in filter(None, runs):
        starts.append(rows)
        jumps.append(run.start - last)
        rows, last = rows + len(run), run.stop - 1
    mask = pc.is_in(_offsets(rows, 1), value_set=pa.array(starts, pa.int64()))
    steps = pc.replace_with_mask(pa.repeat(pa.scalar(1, pa.int64()), rows), mask,
                                 pa.array(jumps, pa.int64()))  # fmt: skip
    return pc.cumulative_sum(steps)


def segment_input(task: Any, slot: int, slots: int, *, splits: Splits) -> SegmentInput:
    """Plugin factory, named in jobs as ``bench.workload:segment_input``."""
    return SegmentInput(int(task.params["count"]), splits, slot, marks=task.params.get("marks"))


def arrow_input(task: Any, slot: int, slots: int, *, splits: Splits) -> SegmentInput:
    """Plugin factory, named in jobs as ``bench.workload:arrow_input``: record batches."""
    return SegmentInput(
        int(task.params["count"]), splits, slot, arrow=True, marks=task.params.get("marks")
    )


class CountingOutput:
    """What the bench's outputs share: their checkpoint is the count of segments written, so
    the count goes on across recoveries, and they have nothing to sync, publish or release."""

    written = 0

    def recover(self, recovery: Recovery) -> None:
        self.written = recovery.checkpoint or 0

    def synced(self) -> bool:
        return True

    def checkpoint(self, epoch: Epoch) -> int:
        return self.written

    def committed(self, epoch: Epoch) -> None:
        return None

    def close(self) -> None:
        return None


class DiscardingOutput(CountingOutput):
    """Discards what it writes (rows or Arrow batches) and counts it. With ``marks``, it notes
    its writes there (``Marker``): the engine's side of the clock Bytewax's sink keeps in
    bench/baselines.py. With ``checked``, its mark says whether the last row it wrote is what
    this workload makes (``is_expected``), as Bytewax's sink partitions are checked; other
    benches' rows are not this workload's, so they leave it out."""

    def __init__(self, slot: int, marks: str | None = None, checked: bool = False) -> None:
        self.staged = 0
        self.marker = Marker(marks, "write", slot)
        self.checked = checked
        self.last: Segment | pa.RecordBatch | None = None
        """The last row prepared (a one-row slice of an Arrow batch), checked at close."""

    def recover(self, recovery: Recovery) -> None:
        super().recover(recovery)
        self.marker.items = self.written

    def prepare(self, segments: list[Segment] | pa.RecordBatch) -> None:
        rows = len(segments)
        if rows and isinstance(segments, pa.RecordBatch):
            self.last = segments.slice(rows - 1)
        elif rows:
            self.last = segments[-1]
        self.staged += rows

    def write(self) -> bool:
        self.written += self.staged
        self.marker.handled(self.staged)
        self.staged = 0
        return True

    def close(self) -> None:
        self.marker.close(not self.checked or self.last is None or is_expected(self.last))


def is_expected(last: Segment | pa.RecordBatch) -> bool:
    """Whether ``last`` (a row, or a one-row record batch) is what the workload makes of its
    id."""
    row = last.to_pylist()[0] if isinstance(last, pa.RecordBatch) else last
    return row == expected(row["id"])


def discarding_output(task: Any, slot: int, slots: int) -> DiscardingOutput:
    """Plugin factory, named in jobs as ``bench.workload:discarding_output``; ``params.check``
    has it check its last row."""
    return DiscardingOutput(slot, task.params.get("marks"), bool(task.params.get("check")))


class PacedInput(SegmentInput):
    """``params.count`` segments at ``params.rate`` per second in all, from its first poll:
    item i is due ``i / rate`` seconds after it and carries that time in ``created`` (so time an
    item waits to be read counts as its latency too). Only the items due are handed out."""

    def __init__(self, count: int, rate: float, splits: Splits, slot: int) -> None:
        super().__init__(count, splits, slot)
        self.rate, self.start = rate, 0.0

    def poll(self, limit: int) -> list[Segment]:
        now = time.time()
        if not self.start:
            self.start = now
        due = int((now - self.start) * self.rate) + 1
        start, rate = self.start, self.rate
        return [{**make_segment(i), "created": start + i / rate}
                for run in self._take(limit, due) for i in run]  # fmt: skip


def paced_input(task: Any, slot: int, slots: int, *, splits: Splits) -> PacedInput:
    """Plugin factory, named in jobs as ``bench.workload:paced_input``."""
    return PacedInput(int(task.params["count"]), float(task.params["rate"]), splits, slot)


LATENCIES: dict[str, list[float]] = defaultdict(list)
"""Run name to the seconds from each segment's ``created`` to its write, in this process."""


class LatencyOutput(CountingOutput):
    """Notes, for every segment it writes, the seconds since its ``created`` under
    ``params.run`` in ``LATENCIES``; keeps nothing else."""

    def __init__(self, run: str) -> None:
        self.run, self.staged = run, []

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


def latency_output(task: Any, slot: int, slots: int) -> LatencyOutput:
    """Plugin factory, named in jobs as ``bench.workload:latency_output``."""
    return LatencyOutput(str(task.params["run"]))
