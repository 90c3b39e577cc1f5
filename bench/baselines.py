"""Baselines for the data plane: the machine's own limit and the same job on Bytewax.

The job is linear: an input of --segments small segments (``make_segment``), three function
tasks that each change one field (``f1``: count + 1, ``f2``: word upper-cased, ``f3``: ts + 1.0)
and an output that discards. bench/dataplane.py runs it through the engine and compares it with
the two figures made here; it imports ``make_segment``, ``f1``, ``f2`` and ``f3`` from this
module (a job names them as ``bench.baselines:f1`` and so on, with the repository root on
sys.path), so every run applies the very same code.

- ``python_limit``: a plain Python loop over pre-encoded batches of --batch-size segments that
  decodes each batch, applies f1, f2 and f3 to every segment and encodes the batch again: the
  least work any engine that moves encoded batches between tasks must do, with no transport,
  no scheduling and no recovery. Best of --repeat runs. The codec is msgpack's packb/unpackb
  when msgpack is installed, else JSON. The same loop with no codec at all (the batches stay
  Python lists) is printed too, as ``functions_only_segments_per_s``: the ceiling for an engine
  that keeps segments in one process, as Bytewax does with one worker.
- ``bytewax_rate``: the same job on Bytewax with its recovery enabled at --snapshot-interval
  (see its docstring for the configuration), with --workers worker threads in this process.
  Best of --repeat runs.

Run: .venv-bench/bin/python bench/baselines.py [--segments 200000] [--batch-size 100]
     [--snapshot-interval 1.0] [--workers 1]
The last line of output is one JSON document holding every figure. Bytewax is a benchmark-only
dependency: without it the Bytewax figure is null.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the engine's types, for the input plugin's hints only: the baselines run alone
    from peer.plugins import Epoch, Recovery

Segment = dict[str, Any]
Encode = Callable[[list[Segment]], bytes]
Decode = Callable[[bytes], list[Segment]]


def make_segment(i: int) -> Segment:
    """The i-th input segment: four small fields."""
    return {"id": i, "word": f"w{i % 1000}", "count": 0, "ts": 1700000000.0 + i}


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


class SegmentInput:
    """The engine's input for this job: ``make_segment(i)`` for this slot's share of
    ``params.count``, made as it is polled, as a generator source would."""

    def __init__(self, count: int, slot: int, slots: int) -> None:
        self.next, self.stop, self.step = slot, count, slots

    def recover(self, recovery: Recovery) -> None:
        if recovery.checkpoint is not None:
            self.next = recovery.checkpoint

    def poll(self, limit: int) -> list[Segment]:
        end = min(self.next + limit * self.step, self.stop)
        batch = [make_segment(i) for i in range(self.next, end, self.step)]
        self.next += len(batch) * self.step
        return batch

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
    """Plugin factory, named in jobs as ``bench.baselines:segment_input``."""
    return SegmentInput(int(task.params["count"]), slot, slots)


def default_codec() -> tuple[str, Encode, Decode]:
    """msgpack's packb/unpackb when msgpack is installed, else JSON as UTF-8 bytes."""
    try:
        import msgpack  # noqa: PLC0415
    except ImportError:
        return "json", _json_encode, _json_decode
    return "msgpack", msgpack.packb, msgpack.unpackb


def _json_encode(batch: list[Segment]) -> bytes:
    return json.dumps(batch, separators=(",", ":")).encode()


def _json_decode(blob: bytes) -> list[Segment]:
    return json.loads(blob)


def _same(batch: Any) -> Any:
    """The codec of a run that never leaves the process: a batch stays a list."""
    return batch


def python_limit(n: int, batch_size: int, encode: Encode, decode: Decode) -> float:
    """Segments per second of a plain loop: decode a batch, f1, f2, f3 on each segment, encode.

    The n segments are made and encoded into batches of batch_size before the clock starts;
    the timed loop decodes each batch, applies the three functions to every segment and
    encodes the batch again, keeping only the encoded size (the output discards). The first
    and last segments are checked against ``expected`` after the clock stops.
    """
    if n <= 0 or batch_size <= 0:
        raise ValueError("n and batch_size must be positive")
    blobs = [
        encode([make_segment(i) for i in range(start, min(start + batch_size, n))])
        for start in range(0, n, batch_size)
    ]
    done = 0
    size = 0
    last: bytes = b""
    start = time.perf_counter()
    for blob in blobs:
        segments = [f3(f2(f1(segment))) for segment in decode(blob)]
        done += len(segments)
        last = encode(segments)
        size += len(last)
    elapsed = time.perf_counter() - start
    if done != n or decode(last)[-1] != expected(n - 1) or size <= 0:
        raise AssertionError(f"python_limit processed {done} of {n} segments or got them wrong")
    return n / elapsed


def bytewax_rate(
    n: int, snapshot_interval_s: float, workers: int = 1, input_batch_size: int = 1000
) -> float:
    """Segments per second of the same job on Bytewax with recovery enabled.

    Configuration, the best honest one found for this job on Bytewax 0.21:

    - Recovery on: a fresh temporary recovery directory initialised with ``workers`` partitions
      (``bytewax.recovery.init_db_dir``, what ``python -m bytewax.recovery DIR N`` does), a
      ``RecoveryConfig(dir)`` with the default zero backup interval, and the epoch (snapshot)
      interval ``epoch_interval=timedelta(seconds=snapshot_interval_s)`` passed to the runner,
      which is how ``python -m bytewax.run -s`` sets it in 0.21. The directory is removed after.
    - Input: a ``FixedPartitionedSource`` of ``workers`` partitions, each a contiguous share of
      the ids, emitting ``input_batch_size`` segments per ``next_batch`` and snapshotting its
      read position (so it resumes exactly). The segments are made with ``make_segment`` before
      the clock starts, as python_limit encodes its batches beforehand; the source only slices.
    - Three ``op.map`` steps applying f1, f2 and f3, the same functions as python_limit.
    - Output: a ``DynamicSink`` (stateless, no routing between workers) whose partitions only
      count the items and note when they last wrote; the total is checked to be n.
    - ``bytewax.testing.run_main`` for one worker; ``cli_main(workers_per_process=workers)`` for
      more, all threads of this process (they share one GIL).

    Wall time runs from just before the runner is called to the sink's last write.
    """
    if n <= 0 or workers <= 0 or input_batch_size <= 0:
        raise ValueError("n, workers and input_batch_size must be positive")
    import bytewax.operators as op  # noqa: PLC0415
    from bytewax._bytewax import cli_main  # noqa: PLC0415
    from bytewax.dataflow import Dataflow  # noqa: PLC0415
    from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition  # noqa: PLC0415
    from bytewax.outputs import DynamicSink, StatelessSinkPartition  # noqa: PLC0415
    from bytewax.recovery import RecoveryConfig, init_db_dir  # noqa: PLC0415
    from bytewax.testing import run_main  # noqa: PLC0415

    segments = [make_segment(i) for i in range(n)]
    bounds = [(n * part // workers, n * (part + 1) // workers) for part in range(workers)]

    class SlicePartition(StatefulSourcePartition):
        def __init__(self, end: int, resume: int) -> None:
            self.position, self.end = resume, end

        def next_batch(self) -> list[Segment]:
            if self.position >= self.end:
                raise StopIteration
            stop = min(self.position + input_batch_size, self.end)
            batch = segments[self.position : stop]
            self.position = stop
            return batch

        def snapshot(self) -> int:
            return self.position

    class SegmentSource(FixedPartitionedSource):
        def list_parts(self) -> list[str]:
            return [f"part-{part}" for part in range(workers)]

        def build_part(self, step_id: str, for_part: str, resume_state: int | None):
            first, end = bounds[int(for_part.removeprefix("part-"))]
            return SlicePartition(end, first if resume_state is None else resume_state)

    tallies: list[list[Any]] = []  # one [count, time of last write, last segment] per worker

    class CountingPartition(StatelessSinkPartition):
        def __init__(self) -> None:
            self.tally: list[Any] = [0, 0.0, None]
            tallies.append(self.tally)

        def write_batch(self, items: list[Segment]) -> None:
            if items:
                self.tally[0] += len(items)
                self.tally[1] = time.perf_counter()
                self.tally[2] = items[-1]

    class CountingSink(DynamicSink):
        def build(self, step_id: str, worker_index: int, worker_count: int):
            return CountingPartition()

    flow = Dataflow("baseline")
    stream = op.input("inp", flow, SegmentSource())
    stream = op.map("f1", stream, f1)
    stream = op.map("f2", stream, f2)
    stream = op.map("f3", stream, f3)
    op.output("out", stream, CountingSink())

    directory = Path(tempfile.mkdtemp(prefix="bytewax-recovery-"))
    try:
        init_db_dir(directory, workers)
        recovery = RecoveryConfig(directory)
        interval = timedelta(seconds=snapshot_interval_s)
        start = time.perf_counter()
        if workers == 1:
            run_main(flow, epoch_interval=interval, recovery_config=recovery)
        else:
            cli_main(
                flow, workers_per_process=workers, epoch_interval=interval, recovery_config=recovery
            )
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    total = sum(tally[0] for tally in tallies)
    lasts = {tally[2]["id"]: tally[2] for tally in tallies if tally[2] is not None}
    if total != n or any(segment != expected(i) for i, segment in lasts.items()):
        raise AssertionError(f"bytewax delivered {total} of {n} segments or got them wrong")
    return n / (max(tally[1] for tally in tallies) - start)


def _best(run: Callable[[], float], repeat: int) -> float:
    return max(run() for _ in range(repeat))


def _bytewax_version() -> str | None:
    try:
        from importlib.metadata import version  # noqa: PLC0415

        return version("bytewax")
    except Exception:
        return None


def _rows(figures: dict[str, Any]) -> Iterator[str]:
    for key, value in figures.items():
        if key.endswith("segments_per_s"):
            shown = "n/a (bytewax not installed)" if value is None else f"{value:,.0f} segments/s"
            yield f"{key}: {shown}"
        elif key.startswith("ratio"):
            yield f"{key}: {value}x"
        elif key.endswith("_s"):
            yield f"{key}: {value} s"
        else:
            yield f"{key}: {value}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--segments", type=int, default=200_000)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--snapshot-interval", type=float, default=1.0)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    codec, encode, decode = default_codec()
    n = args.segments
    limit = _best(lambda: python_limit(n, args.batch_size, encode, decode), args.repeat)
    bare = _best(lambda: python_limit(n, args.batch_size, _same, _same), args.repeat)
    version = _bytewax_version()
    rate = None
    if version is not None:
        rate = _best(lambda: bytewax_rate(n, args.snapshot_interval, args.workers), args.repeat)
    figures: dict[str, Any] = {
        "segments": n,
        "batch_size": args.batch_size,
        "codec": codec,
        "bytewax_version": version,
        "workers": args.workers,
        "snapshot_interval_s": args.snapshot_interval,
        "functions_only_segments_per_s": round(bare),
        "limit_segments_per_s": round(limit),
        "bytewax_segments_per_s": None if rate is None else round(rate),
    }
    if rate is not None:
        figures["ratio_limit_to_bytewax"] = round(limit / rate, 1)
    for row in _rows(figures):
        print(row)
    print(json.dumps(figures, sort_keys=True))


if __name__ == "__main__":
    main()


def sample(segment: Segment) -> Segment | None:
    """Every 1000th segment: keeps an output small while the job still does all the work."""
    return segment if segment["id"] % 1000 == 0 else None
